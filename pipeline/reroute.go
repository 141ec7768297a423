package pipeline

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/riverqueue/river"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger"
)

// rerouteLimit bounds the jobs one reroute moves; a larger scope is moved
// by running it again.
const rerouteLimit = 1000

// Reroute is an operator's boundary decision (docs/design.md §5.8): it
// moves the blocked jobs of p.Scope to p.To, a processor the policy now in
// force permits for each of them, and enqueues their extract stage. Each
// decision — actor, reason, old and new processor, the policy in force and
// its hash — is kept with its job and audited (job.reroute), in the
// transaction that moves it. With p.DryRun it only lists the jobs.
//
// Nothing moves unless every job can: a job of the scope that is not
// blocked (job:ID), or a processor the policy in force does not permit, or
// a policy no longer in force, is stet.EConflict with the reason; a blank
// reason or a malformed scope stet.EInvalid; an unknown job (or another
// tenant's) stet.ENotFound.
func (p *Pipeline) Reroute(ctx context.Context, rp ledger.RerouteParams) (ledger.Rerouted, error) {
	out := ledger.Rerouted{Scope: rp.Scope, To: rp.To, DryRun: rp.DryRun, Jobs: []ledger.ReroutedJob{}}
	switch {
	case strings.TrimSpace(rp.Reason) == "":
		return out, &stet.Error{Code: stet.EInvalid, Message: "a reason is required: who approved the processor, and where"}
	case rp.To == "":
		return out, &stet.Error{Code: stet.EInvalid, Message: "to must name a configured processor"}
	}
	jobs, err := p.db.ScopeJobs(ctx, rp.Tenant, rp.Scope, rerouteLimit)
	if err != nil {
		return out, err
	}
	for _, j := range jobs {
		if j.State != stet.JobBlocked {
			return out, &stet.Error{Code: stet.EConflict, Message: fmt.Sprintf("job %s is %s: only a blocked job is rerouted", j.ID, j.State)}
		}
		if why := p.permitsNow(j.PolicyID, rp.To); why != "" {
			return out, &stet.Error{Code: stet.EConflict, Message: fmt.Sprintf("processor %s may not receive job %s's text under policy %s now in force (%s)", rp.To, j.ID, j.PolicyID, why)}
		}
		out.Jobs = append(out.Jobs, ledger.ReroutedJob{JobID: j.ID, From: j.Processor})
	}
	if rp.DryRun || len(jobs) == 0 {
		return out, nil
	}
	now := p.clock.Now()
	err = p.inTx(ctx, "reroute", func(ctx context.Context, tx *sql.Tx) error {
		inserts := make([]river.InsertManyParams, 0, len(jobs))
		audits := make([]ledger.AuditEntry, 0, len(jobs))
		for _, j := range jobs {
			current := p.policies[j.PolicyID]
			d := ledger.BoundaryDecision{JobID: j.ID, Actor: rp.Actor, Reason: rp.Reason, From: j.Processor, To: rp.To,
				PolicyID: current.ID, PolicyHash: current.Hash(), At: now}
			if err := ledger.Reroute(ctx, tx, d); err != nil {
				if errors.Is(err, ledger.ErrNotBlocked) {
					return &stet.Error{Code: stet.EConflict, Message: fmt.Sprintf("job %s is no longer blocked: nothing was moved", j.ID)}
				}
				return err
			}
			inserts = append(inserts, river.InsertManyParams{Args: ExtractArgs{JobID: j.ID}})
			audits = append(audits, ledger.AuditEntry{Tenant: j.TenantID, Actor: rp.Actor, Action: "job.reroute", ObjectType: "job",
				ObjectID: j.ID, Detail: "processor:" + j.Processor + " -> processor:" + rp.To, Now: now})
		}
		if _, err := p.river.InsertManyTx(ctx, tx, inserts); err != nil {
			return fmt.Errorf("enqueue extract: %w", err)
		}
		return ledger.AuditMany(ctx, tx, audits)
	})
	if err != nil {
		return ledger.Rerouted{Scope: rp.Scope, To: rp.To, Jobs: []ledger.ReroutedJob{}}, err
	}
	p.log.Warn("blocked jobs rerouted by an operator's boundary decision", "scope", rp.Scope, "processor", rp.To, "jobs", len(jobs))
	return out, nil
}

// permitsNow says why processorID may not receive text of a job accepted
// under policyID, judged by the policy now in force alone (a boundary
// decision stands in for the recorded one), or "" if it may.
func (p *Pipeline) permitsNow(policyID, processorID string) string {
	current := p.policies[policyID]
	if current == nil {
		return "policy_not_in_force"
	}
	return p.forbidden(current, current, processorID)
}
