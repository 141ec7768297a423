package pipeline

import (
	"context"
	"database/sql"
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
//
// It works in two passes, each reading a page at a time in index order, so
// a million held jobs cost a million rows read, not a million per page:
// first the pending River extract jobs in River ID order, with the held
// ledger job each one is for (that River job is the one cancelled); then
// the held jobs the first pass did not convert (a blocked job's River job
// has ended), from jobs_held, each looking only at River jobs inserted
// after the first pass ended. A River job the passes do not see (a ledger
// job's second pending one, or one for a job that was not held when the
// first pass read it) stays pending; when it runs it finds the job manual
// and does nothing.
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
	inScope := func(held []heldJob) ([]heldJob, error) {
		var todo []heldJob
		for _, h := range held {
			r, err := p.manualRoute(ctx, h.HeldJob)
			if err != nil {
				return nil, err
			}
			if processorID == "" || r.processor == processorID {
				todo = append(todo, h)
			}
		}
		return todo, nil
	}
	converted := 0
	// lastRiver is the first pass's cursor. When a page finds no River
	// extract job after it, the pass has seen every one up to it, and the
	// second pass looks only at those inserted since.
	var lastRiver int64
	for {
		held, last, err := p.heldByRiver(ctx, tenant, lastRiver)
		if err != nil {
			return converted, err
		}
		if last == lastRiver {
			break // no River job after lastRiver
		}
		lastRiver = last
		todo, err := inScope(held)
		if err != nil {
			return converted, err
		}
		n, err := p.convertHeld(ctx, todo, 0, mp)
		converted += n
		if err != nil {
			return converted, err
		}
	}
	for after := ""; ; {
		jobs, err := p.db.HeldJobs(ctx, tenant, after, manualBatch)
		if err != nil || len(jobs) == 0 {
			return converted, err
		}
		after = jobs[len(jobs)-1].ID
		held := make([]heldJob, len(jobs))
		for i, j := range jobs {
			held[i] = heldJob{HeldJob: j}
		}
		todo, err := inScope(held)
		if err != nil {
			return converted, err
		}
		n, err := p.convertHeld(ctx, todo, lastRiver, mp)
		converted += n
		if err != nil {
			return converted, err
		}
	}
}

// heldJob is a held ledger job and, from the first pass, the pending River
// extract job it was found by (riverID 0 from the second).
type heldJob struct {
	ledger.HeldJob
	riverID int64
}

// manualRoute is the gate's decision for an operator's manual conversion:
// routeManual, for the processor the gate would send the job to, carrying
// the job's failure class.
func (p *Pipeline) manualRoute(ctx context.Context, h ledger.HeldJob) (route, error) {
	recorded, err := p.recordedPolicy(ctx, h.PolicyHash)
	if err != nil {
		return route{}, err
	}
	id := p.chooseProcessor(p.candidates(recorded, p.profiles[h.ExtractionVersion]), recorded, p.policies[recorded.ID], h.ProcessorID, h.FailureClass)
	return route{kind: routeManual, processor: id, class: h.FailureClass, reason: reasonOperatorManual, recorded: recorded}, nil
}

// heldByRiver reads one page of held jobs by their River extract jobs
// (ledger.HeldByRiver): the held jobs found, and the last River job read
// (after, when the page was empty: the end).
func (p *Pipeline) heldByRiver(ctx context.Context, tenant string, after int64) ([]heldJob, int64, error) {
	page, last, err := p.db.HeldByRiver(ctx, tenant, after, manualBatch)
	if err != nil {
		return nil, after, err
	}
	out := make([]heldJob, len(page))
	for i, h := range page {
		out[i] = heldJob{HeldJob: h.HeldJob, riverID: h.RiverID}
	}
	return out, last, nil
}

// convertHeld converts one batch in one transaction and returns how many
// jobs it converted: the conversions first (ledger.ManualFromHeldPage, one
// statement on PostgreSQL), then each converted job's River extract jobs
// cancelled (the one it was found by, or those after riverSeen; on
// PostgreSQL those not running in one statement), then the
// audit entries, one per conversion in the batch's order, appended last.
func (p *Pipeline) convertHeld(ctx context.Context, jobs []heldJob, riverSeen int64, mp ledger.ManualParams) (int, error) {
	if len(jobs) == 0 {
		return 0, nil
	}
	page := make([]ledger.HeldRef, len(jobs))
	for i, h := range jobs {
		page[i] = ledger.HeldRef{JobID: h.ID, Token: h.Attempt, Part: h.Part}
	}
	n := 0
	err := p.inTx(ctx, "manual.convert", func(ctx context.Context, tx *sql.Tx) error {
		now := p.clock.Now()
		records, err := p.db.ManualFromHeldPage(ctx, tx, page, now)
		if err != nil {
			return err
		}
		converted := make([]heldJob, 0, len(records))
		entries := make([]ledger.AuditEntry, 0, len(records))
		for _, h := range jobs {
			recordID, ok := records[h.ID]
			if !ok {
				continue // claimed, resumed or converted since it was read
			}
			delete(records, h.ID) // a job listed twice (two River jobs) converts once
			converted = append(converted, h)
			entries = append(entries, ledger.AuditEntry{Tenant: cmpOr(mp.AuditTenant, "*"), Actor: mp.Actor,
				Action: "job.manual", ObjectType: "job", ObjectID: h.ID,
				Detail: manualDetail(mp.Scope, h.FailureClass, recordID, mp.Reason),
				Route:  mp.Route, RemoteAddr: mp.RemoteAddr, RequestID: mp.RequestID, Now: now})
		}
		if err := p.cancelExtracts(ctx, tx, converted, riverSeen); err != nil {
			return err
		}
		n = len(entries)
		return ledger.AuditMany(ctx, tx, entries)
	})
	if err != nil {
		return 0, fmt.Errorf("convert held jobs to manual: %w", err)
	}
	return n, nil
}

// cancelExtracts cancels the River extract jobs of a batch's converted
// jobs inside tx. Those found by their River job that are not running are
// cancelled in one statement where the ledger can (a call per job was most
// of a batch's round trips); every other goes to cancelExtract.
func (p *Pipeline) cancelExtracts(ctx context.Context, tx *sql.Tx, jobs []heldJob, riverSeen int64) error {
	var ids []int64
	for _, h := range jobs {
		if h.riverID != 0 {
			ids = append(ids, h.riverID)
		}
	}
	done, err := p.db.CancelWaitingJobs(ctx, tx, ids)
	if err != nil {
		return err
	}
	for _, h := range jobs {
		if h.riverID != 0 && done[h.riverID] {
			continue
		}
		if err := p.cancelExtract(ctx, tx, h, riverSeen); err != nil {
			return err
		}
	}
	return nil
}

// cancelExtract cancels h's pending River extract jobs inside tx: the one
// it was found by, or else any inserted after River job riverSeen.
func (p *Pipeline) cancelExtract(ctx context.Context, tx *sql.Tx, h heldJob, riverSeen int64) error {
	if h.riverID != 0 {
		if _, err := p.river.JobCancelTx(ctx, tx, h.riverID); err != nil {
			return fmt.Errorf("cancel river job of %s: %w", h.ID, err)
		}
		return nil
	}
	ids, err := p.db.PendingRiverJobs(ctx, tx, h.ID, riverSeen)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if _, err := p.river.JobCancelTx(ctx, tx, id); err != nil {
			return fmt.Errorf("cancel river job of %s: %w", h.ID, err)
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
