package pipeline

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger"
)

// manualBatch bounds one conversion transaction.
const manualBatch = 200

// Manual converts the waiting and blocked jobs of p.Scope into manual
// review records carrying each job's failure class, in transactions of at
// most manualBatch jobs. Each conversion is fenced on the job's attempt
// token (a job a worker claimed meanwhile is left alone), cancels the job's
// pending River extract job in the same transaction so it never runs, and
// appends its audit entry there too. A job that already has a review record
// is skipped, so running it again converts nothing new. It returns how many
// jobs it converted.
func (p *Pipeline) Manual(ctx context.Context, mp ledger.ManualParams) (int, error) {
	if !ledger.ValidScope(mp.Scope) {
		return 0, stet.Errorf(stet.EInvalid, "scope must be all, processor:ID or tenant:ID")
	}
	kind, id, _ := strings.Cut(mp.Scope, ":")
	tenant, processorID := ledger.AnyTenant, ""
	switch kind {
	case "tenant":
		tenant = id
	case "processor":
		processorID = id
	}
	converted, after := 0, ""
	for {
		held, err := ledger.HeldJobs(ctx, p.db.Reader(), tenant, after, manualBatch)
		if err != nil {
			return converted, err
		}
		if len(held) == 0 {
			return converted, nil
		}
		after = held[len(held)-1].ID
		var todo []ledger.HeldJob
		for _, h := range held {
			r, err := p.manualRoute(ctx, h)
			if err != nil {
				return converted, err
			}
			if processorID == "" || r.processor == processorID {
				todo = append(todo, h)
			}
		}
		n, err := p.convertHeld(ctx, todo, mp)
		converted += n
		if err != nil {
			return converted, err
		}
	}
}

// manualRoute is the gate's decision for an operator's manual conversion:
// routeManual, for the processor the gate would send the job to, carrying
// the job's failure class.
func (p *Pipeline) manualRoute(ctx context.Context, h ledger.HeldJob) (route, error) {
	recorded, err := p.recordedPolicy(ctx, h.PolicyHash)
	if err != nil {
		return route{}, err
	}
	id := p.chooseProcessor(recorded, p.policies[recorded.ID], h.ProcessorID, h.FailureClass)
	return route{kind: routeManual, processor: id, class: h.FailureClass, reason: reasonOperatorManual, recorded: recorded}, nil
}

// qPendingExtract finds a ledger job's River extract jobs that have not run
// to an end; `->>` reads River's args the same way on both dialects. A
// running one (a worker that is about to snooze it) is included: River
// cancels it when that execution ends instead of rescheduling it.
const qPendingExtract = `SELECT id FROM river_job WHERE kind = 'stet_extract' AND args ->> 'job_id' = $1
	AND state IN ('available', 'scheduled', 'retryable', 'pending', 'running')`

// convertHeld converts one batch in one transaction and returns how many
// jobs it converted.
func (p *Pipeline) convertHeld(ctx context.Context, jobs []ledger.HeldJob, mp ledger.ManualParams) (int, error) {
	if len(jobs) == 0 {
		return 0, nil
	}
	n := 0
	err := p.inTx(ctx, "manual.convert", func(ctx context.Context, tx *sql.Tx) error {
		n = 0
		now := p.clock.Now()
		for _, h := range jobs {
			recordID, err := ledger.ManualFromHeld(ctx, tx, h.ID, h.Attempt, now)
			if errors.Is(err, stet.ErrLeaseLost) {
				continue // claimed, resumed or converted since it was read
			}
			if err != nil {
				return err
			}
			if err := p.cancelExtract(ctx, tx, h.ID); err != nil {
				return err
			}
			if err := ledger.Audit(ctx, tx, ledger.AuditEntry{Tenant: cmpOr(mp.AuditTenant, "*"), Actor: mp.Actor,
				Action: "job.manual", ObjectType: "job", ObjectID: h.ID,
				Detail: manualDetail(mp.Scope, h.FailureClass, recordID, mp.Reason),
				Route:  mp.Route, RemoteAddr: mp.RemoteAddr, RequestID: mp.RequestID, Now: now}); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("convert held jobs to manual: %w", err)
	}
	return n, nil
}

// cancelExtract cancels jobID's pending River extract jobs inside tx.
func (p *Pipeline) cancelExtract(ctx context.Context, tx *sql.Tx, jobID string) error {
	rows, err := tx.QueryContext(ctx, qPendingExtract, jobID)
	if err != nil {
		return fmt.Errorf("find river jobs of %s: %w", jobID, err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return fmt.Errorf("find river jobs of %s: %w", jobID, err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("find river jobs of %s: %w", jobID, err)
	}
	for _, id := range ids {
		if _, err := p.river.JobCancelTx(ctx, tx, id); err != nil {
			return fmt.Errorf("cancel river job of %s: %w", jobID, err)
		}
	}
	return nil
}

func manualDetail(scope string, class stet.FailureClass, recordID, reason string) string {
	d := "scope=" + scope + " review_record=" + recordID
	if class != "" {
		d += " failure_class=" + string(class)
	}
	if reason != "" {
		d += " reason=" + reason
	}
	return d
}

func cmpOr(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
