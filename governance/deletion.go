package governance

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/riverqueue/river"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger"
)

// DeleteArgs is a deletion's worker: IDs only.
type DeleteArgs struct {
	DeletionID string `json:"deletion_id"`
}

// Kind implements river.JobArgs.
func (DeleteArgs) Kind() string { return "stet_delete" }

// InsertOpts implements river.JobArgsWithInsertOpts. One worker per
// deletion, not one per task: the tasks run in order (the data key first,
// then the rows, then SQLite's WAL checkpoint once every local copy is
// gone, then the provider copies), SQLite has one writer anyway, and the
// deletion's state is decided once, from every task, at the end of a run.
// Each task's outcome is committed as it ends, so a retry resumes at the
// first task not done and never reports a task it did not verify.
func (DeleteArgs) InsertOpts() river.InsertOpts {
	// The batch queue: maintenance work shares it, and on SQLite every
	// extra queue is one more poller on the single writer.
	return river.InsertOpts{Queue: QueueBatch, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

type deleteWorker struct {
	river.WorkerDefaults[DeleteArgs]
	g *Governance
}

// NextRetry retries a failed task (the database down, a provider's 5xx)
// with the stage backoff, from the injected clock.
func (w *deleteWorker) NextRetry(job *river.Job[DeleteArgs]) time.Time {
	return w.g.cfg.Clock.Now().Add(w.g.cfg.Backoff(job.Attempt))
}

func (w *deleteWorker) Work(ctx context.Context, job *river.Job[DeleteArgs]) error {
	return w.g.runDeletion(ctx, job.Args.DeletionID)
}

// RequestDeletion records a deletion (ledger.DB.RequestDeletion) and enqueues
// its worker in the same transaction: the request, the tombstone and the
// cancellation of the report's unfinished jobs commit together, or not at
// all.
func (g *Governance) RequestDeletion(ctx context.Context, r ledger.DeletionRequest) (ledger.DeletionRequested, error) {
	if r.Now.IsZero() {
		r.Now = g.cfg.Clock.Now()
	}
	var out ledger.DeletionRequested
	var err error
	for try := 0; try < 3; try++ {
		err = g.cfg.DB.InTx(ctx, func(tx *sql.Tx) error {
			var err error
			out, err = g.cfg.DB.RequestDeletion(ctx, tx, r)
			if err != nil || !out.Created {
				return err
			}
			_, err = g.river.InsertTx(ctx, tx, DeleteArgs{DeletionID: out.DeletionID}, nil)
			return err
		})
		if !errors.Is(err, ledger.ErrRetryItem) && !g.cfg.DB.IsRetryable(err) {
			break
		}
	}
	if err != nil {
		return out, err
	}
	if out.Created {
		g.cfg.Log.Info("deletion requested", "deletion_id", out.DeletionID, "report_id", out.ReportID, "tenant", r.Tenant)
	}
	return out, nil
}

// runDeletion runs every pending task of a deletion once. A task that fails
// for a reason that may pass (the database, a provider's 5xx) returns the
// error: River retries the worker and the task stays pending. A deletion is
// done only when every task is done.
func (g *Governance) runDeletion(ctx context.Context, id string) error {
	d, err := g.cfg.DB.GetDeletion(ctx, ledger.AnyTenant, id)
	if err != nil {
		return fmt.Errorf("read deletion %s: %w", id, err)
	}
	if d.State != stet.DeletionPending {
		return nil
	}
	log := g.cfg.Log.With("deletion_id", id, "report_id", d.ReportID, "tenant", d.TenantID, "stage", "delete")
	// Copies made since the request (a batch's output file) get a task.
	if err := ledger.AddDeletionTasks(ctx, g.cfg.DB.Writer(), id, d.ReportID, g.cfg.Clock.Now()); err != nil {
		return err
	}
	if d, err = g.cfg.DB.GetDeletion(ctx, ledger.AnyTenant, id); err != nil {
		return err
	}
	wait := false
	for _, t := range d.Tasks {
		if t.State != stet.DeletionPending {
			continue
		}
		if slices.Contains(ledger.LocalCopies, t.Copy) {
			if err := g.deleteLocal(ctx, d, t.Copy); err != nil {
				return fmt.Errorf("deletion %s: %s: %w", id, t.Copy, err)
			}
			continue
		}
		later, err := g.deleteProviderCopy(ctx, d, t.Copy)
		if err != nil {
			return fmt.Errorf("deletion %s: %s: %w", id, t.Copy, err)
		}
		wait = wait || later
	}
	if err := g.checkpointAfterLocal(ctx, d.ID); err != nil {
		return err
	}
	// The deletion's end and its audit row commit together: a crash
	// between them would leave a finished deletion no one can trace.
	var state stet.DeletionState
	if err := g.cfg.DB.InTx(ctx, func(tx *sql.Tx) error {
		var err error
		if state, err = ledger.FinishDeletion(ctx, tx, id, g.cfg.Clock.Now()); err != nil || state == stet.DeletionPending {
			return err
		}
		return ledger.Audit(ctx, tx, ledger.AuditEntry{Tenant: d.TenantID, Actor: "stet", Action: "deletion." + string(state),
			ObjectType: "deletion", ObjectID: id, Now: g.cfg.Clock.Now()})
	}); err != nil {
		return err
	}
	if state == stet.DeletionPending {
		if wait {
			// A provider copy is still in use (its batch is not applied yet).
			return river.JobSnooze(g.cfg.SweepInterval)
		}
		return fmt.Errorf("deletion %s: tasks remain pending", id)
	}
	log.Info("deletion finished", "state", string(state))
	return nil
}

// checkpointAfterLocal truncates SQLite's WAL once the deletion's local
// copies are all done, so their bytes leave the -wal file as well.
func (g *Governance) checkpointAfterLocal(ctx context.Context, id string) error {
	d, err := g.cfg.DB.GetDeletion(ctx, ledger.AnyTenant, id)
	if err != nil {
		return err
	}
	for _, t := range d.Tasks {
		if slices.Contains(ledger.LocalCopies, t.Copy) && t.State != stet.DeletionDone {
			return nil
		}
	}
	if err := g.cfg.DB.Checkpoint(ctx); err != nil {
		return fmt.Errorf("deletion %s: %w", id, err)
	}
	return nil
}

// deleteLocal deletes one local copy, then verifies with a query that must
// find nothing; only then is the task done.
func (g *Governance) deleteLocal(ctx context.Context, d *stet.Deletion, copy string) error {
	now := g.cfg.Clock.Now()
	if copy == ledger.CopyEncryptionKey && !g.cfg.Encryption {
		return ledger.SetTask(ctx, g.cfg.DB.Writer(), d.ID, copy, stet.DeletionDone, "encryption off", time.Time{}, now)
	}
	if err := g.cfg.DB.InTx(ctx, func(tx *sql.Tx) error {
		return ledger.DeleteLocalCopy(ctx, tx, copy, d.ReportID, now)
	}); err != nil {
		return err
	}
	left, err := ledger.VerifyLocalCopy(ctx, g.cfg.DB.Writer(), copy, d.ReportID)
	if err != nil {
		return err
	}
	if left != 0 {
		return fmt.Errorf("verify: %d rows remain", left)
	}
	return ledger.SetTask(ctx, g.cfg.DB.Writer(), d.ID, copy, stet.DeletionDone, "", time.Time{}, g.cfg.Clock.Now())
}

// deleteProviderCopy handles one copy a provider holds. It reports later
// when the copy cannot be deleted yet (its batch's results are not all
// applied: deleting it would lose other reports' results).
func (g *Governance) deleteProviderCopy(ctx context.Context, d *stet.Deletion, copy string) (later bool, err error) {
	now := g.cfg.Clock.Now()
	unresolved := func(reason string, expires time.Time) (bool, error) {
		return false, ledger.SetTask(ctx, g.cfg.DB.Writer(), d.ID, copy, stet.DeletionUnresolved, reason, expires, now)
	}
	done := func(reason string) (bool, error) {
		return false, ledger.SetTask(ctx, g.cfg.DB.Writer(), d.ID, copy, stet.DeletionDone, reason, time.Time{}, now)
	}
	switch {
	case strings.HasPrefix(copy, ledger.PrefixProviderRetention):
		procID := strings.TrimPrefix(copy, ledger.PrefixProviderRetention)
		var info stet.ProcessorInfo
		if proc := g.cfg.Processors[procID]; proc != nil {
			info = proc.Info()
		} else if t, ok := g.cfg.Transcribers[procID]; ok {
			info = t // a transcriber heard the report's audio
		} else {
			return unresolved("the processor is no longer configured: its retention is unknown", time.Time{})
		}
		keep, none, err := ParseRetention(info.Retention)
		switch {
		case info.Retention == "pending":
			return unresolved("the processor's declared retention is pending: confirm the copy is gone with stet deletions confirm", time.Time{})
		case info.ZeroRetention:
			return done("zero data retention")
		case err != nil:
			return unresolved("the processor's declared retention does not parse", time.Time{})
		case none:
			return done("retention: none")
		}
		last, err := ledger.LastSyncCall(ctx, g.cfg.DB.Writer(), d.ReportID, procID)
		if err != nil {
			return false, err
		}
		if expires := last.Add(keep); expires.After(now) {
			return unresolved("held by the processor under its declared retention ("+info.Retention+"); it has no delete API for synchronous calls", expires)
		}
		return done(ledger.ReasonExpired) // the retention ended before the deletion
	case strings.HasPrefix(copy, ledger.PrefixProviderFile), strings.HasPrefix(copy, ledger.PrefixProviderBatch):
		isFile := strings.HasPrefix(copy, ledger.PrefixProviderFile)
		rest := strings.TrimPrefix(strings.TrimPrefix(copy, ledger.PrefixProviderFile), ledger.PrefixProviderBatch)
		procID, providerID, ok := strings.Cut(rest, "/")
		if !ok || providerID == "" {
			return unresolved("the copy's name does not parse", time.Time{})
		}
		b, err := ledger.BatchOfCopy(ctx, g.cfg.DB.Writer(), procID, providerID)
		if err != nil && !errors.Is(err, stet.ErrNotFound) {
			return false, err
		}
		var expires time.Time
		if b != nil {
			expires = b.ExpiresAt
			if b.State == "unknown" {
				return unresolved("the batch's state is unknown: reconcile it first (stet batch reconcile)", expires)
			}
			if !b.Applied {
				return true, nil // other reports' results are still in it
			}
		}
		proc := g.cfg.Processors[procID]
		if proc == nil {
			return unresolved("the processor is no longer configured", expires)
		}
		cd, ok := proc.(stet.CopyDeleter)
		if !ok {
			return unresolved("the "+proc.Info().Kind+" adapter cannot delete provider copies yet; the provider keeps it until its own expiry", expires)
		}
		cctx, cancel := context.WithTimeout(ctx, g.cfg.JobTimeout)
		if isFile {
			err = cd.DeleteFile(cctx, providerID)
		} else {
			err = cd.DeleteBatch(cctx, providerID)
		}
		cancel()
		switch class := stet.ClassOf(err); {
		case err == nil:
			return done("")
		case class == stet.FailureTransient || class == stet.FailureRateLimited:
			return false, err // River retries the worker
		case noDeleteAPI(err):
			return unresolved("unsupported: the "+proc.Info().Kind+" API has no delete for this copy ("+stet.CodeNoDeleteAPI+"); the provider keeps it under its own retention", expires)
		default:
			return unresolved("the provider refused the delete ("+string(class)+")", expires)
		}
	case strings.HasPrefix(copy, ledger.PrefixOutbound):
		// The record.deleted events were queued with the request; the
		// delivery worker sends them. Done once every one arrived.
		state, err := ledger.OutboundDeletedState(ctx, g.cfg.DB.Writer(), d.ReportID, strings.TrimPrefix(copy, ledger.PrefixOutbound))
		switch {
		case err != nil:
			return false, err
		case state == "done":
			return done("")
		case state == "failed":
			return unresolved("the destination did not accept the record.deleted event (failed for good or disabled)", time.Time{})
		default:
			return true, nil // not delivered yet: look again later
		}
	default:
		return unresolved("unknown copy", time.Time{})
	}
}

// noDeleteAPI reports whether a CopyDeleter said its provider's API cannot
// delete the copy at all (stet.CodeNoDeleteAPI).
func noDeleteAPI(err error) bool {
	var pe *stet.ProcessorError
	return errors.As(err, &pe) && pe.Code == stet.CodeNoDeleteAPI
}

// ParseRetention reads a processor's declared retention: "none", "0" or
// empty (nothing kept: none is true), or a duration with s, m, h or d.
func ParseRetention(s string) (d time.Duration, none bool, err error) {
	s = strings.TrimSpace(s)
	switch s {
	case "", "none", "0":
		return 0, true, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 64)
		if err != nil || n < 0 {
			return 0, false, fmt.Errorf("retention %q does not parse", s)
		}
		return time.Duration(n) * 24 * time.Hour, n == 0, nil
	}
	d, err = time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, false, fmt.Errorf("retention %q does not parse", s)
	}
	return d, d == 0, nil
}
