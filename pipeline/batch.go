package pipeline

// Provider batches (docs/design.md §4). Batch-mode jobs wait in 'accepted' until the
// assembler groups them per processor into a batch row in state intent with
// its items (one transaction). One snoozing River job per batch then
// submits it once, polls it on a durable schedule (batches.next_poll_at and
// River's snooze), fetches its results once and applies each item once (the
// item's applied_at marker and its artifact in one transaction), after
// which the record stage runs as for sync jobs.
//
// A submission is recorded as in flight (submit_started_at) immediately
// before the provider's creating call. If the process dies or the call ends
// ambiguously after that, the next run never submits blindly: a provider
// that honours an Idempotency-Key is resent with the same key (our batch
// ID); the others are reconciled by looking the batch up, and a batch that
// cannot be established goes to 'unknown' for an operator.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/governance"
	"github.com/stetlabs/stet/internal/crash"
	"github.com/stetlabs/stet/ledger"
)

// QueueBatch runs batch submission, polling and application, and the
// assembler.
const QueueBatch = governance.QueueBatch

// BatchSettings tune one processor's batches.
type BatchSettings struct {
	MaxItems  int           // a batch is assembled at this many jobs; default 1000 (capped by the provider's limit)
	MaxWait   time.Duration // or once its oldest job waited this long; default 10m
	PollFirst time.Duration // the first poll after submission; default 30s
	PollMax   time.Duration // the poll backoff cap; default 10m
	// OnExpired is where items that ended without an answer (expired,
	// cancelled, a transient or rate-limited error) go: the next batch
	// (default) or synchronous extraction.
	OnExpired stet.DispatchMode
}

func (s BatchSettings) withDefaults(info stet.BatchInfo) BatchSettings {
	setDefault(&s.MaxItems, 1000)
	if info.MaxItems > 0 && s.MaxItems > info.MaxItems {
		s.MaxItems = info.MaxItems
	}
	setDefault(&s.MaxWait, 10*time.Minute)
	setDefault(&s.PollFirst, 30*time.Second)
	setDefault(&s.PollMax, 10*time.Minute)
	if s.PollMax < s.PollFirst {
		s.PollMax = s.PollFirst
	}
	if s.OnExpired != stet.ModeSync {
		s.OnExpired = stet.ModeBatch
	}
	return s
}

// BatchArgs is one batch's job: it submits, polls and applies the batch,
// snoozing in between. IDs only.
type BatchArgs struct {
	BatchID string `json:"batch_id"`
}

// Kind implements river.JobArgs.
func (BatchArgs) Kind() string { return "stet_batch" }

// InsertOpts implements river.JobArgsWithInsertOpts.
func (BatchArgs) InsertOpts() river.InsertOpts {
	// River's default priority (1), as the maintenance jobs sharing the
	// batch queue: a lower one would let the invariant checks and sweeps
	// starve the batches.
	return river.InsertOpts{Queue: QueueBatch}
}

// AssembleArgs is the periodic sweep that puts waiting batch-mode jobs into
// batches.
type AssembleArgs struct{}

// Kind implements river.JobArgs.
func (AssembleArgs) Kind() string { return "stet_assemble" }

// InsertOpts implements river.JobArgsWithInsertOpts.
func (AssembleArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Queue: QueueBatch} }

type assembleWorker struct {
	river.WorkerDefaults[AssembleArgs]
	p *Pipeline
}

func (w *assembleWorker) Work(ctx context.Context, job *river.Job[AssembleArgs]) error {
	if len(w.p.cfg.Budgets) > 0 {
		// The leader's periodic look also ends the budget pauses of
		// earlier days.
		w.p.liftBudgetPauses(ctx)
	}
	_, err := w.p.Assemble(ctx, false)
	return err
}

type batchWorker struct {
	river.WorkerDefaults[BatchArgs]
	p *Pipeline
}

// Timeout gives a batch run room for large uploads and result files; each
// provider call has its own timeout.
func (w *batchWorker) Timeout(*river.Job[BatchArgs]) time.Duration { return 30 * time.Minute }

// NextRetry: a batch run that errors looks again soon; it never submits
// twice, whatever happened.
func (w *batchWorker) NextRetry(job *river.Job[BatchArgs]) time.Time {
	return w.p.clock.Now().Add(w.p.backoff(min(job.Attempt, 8)))
}

func (w *batchWorker) Work(ctx context.Context, job *river.Job[BatchArgs]) error {
	start := time.Now() // elapsed time for the metric: the monotonic clock, not the injected one
	outcome, err := w.p.runBatch(ctx, job.Args.BatchID)
	w.p.cfg.Metrics.StageDuration.WithLabelValues("batch", outcome).Observe(time.Since(start).Seconds())
	return err
}

// assembleLimit bounds the jobs one sweep reads.
const assembleLimit = 50000

// batchProcessor returns the processor's batch API, or nil.
func (p *Pipeline) batchProcessor(id string) stet.BatchProcessor {
	bp, _ := p.cfg.Processors[id].(stet.BatchProcessor)
	return bp
}

func (p *Pipeline) batchSettings(id string) BatchSettings {
	var info stet.BatchInfo
	if bp := p.batchProcessor(id); bp != nil {
		info = bp.BatchInfo()
	}
	return p.cfg.Batch[id].withDefaults(info)
}

// Assemble groups waiting batch-mode jobs per processor into batches. A
// group becomes a batch when it reaches the processor's max_items, or when
// its oldest job has waited max_wait (or at once, with flush). Each job
// passes the boundary gate first: jobs it blocks or sends to manual review
// go there now, jobs it holds (a dispatch pause) wait in accepted, and jobs
// whose processor has no batch API go to synchronous extraction. It returns
// the batches created.
func (p *Pipeline) Assemble(ctx context.Context, flush bool) (int, error) {
	if err := p.requeueOverdue(ctx); err != nil {
		return 0, err
	}
	pending, err := ledger.PendingBatchJobs(ctx, p.db.Writer(), assembleLimit)
	if err != nil || len(pending) == 0 {
		return 0, err
	}
	// Jobs of profiles with parts are batched part by part: fan them out,
	// then read again.
	var parents []ledger.PendingJob
	for _, j := range pending {
		if pr := p.profiles[j.ExtractionVersion]; pr != nil && len(pr.Parts) > 0 {
			parents = append(parents, j)
		}
	}
	if len(parents) > 0 {
		if err := p.fanOutBatch(ctx, parents); err != nil {
			return 0, err
		}
		if pending, err = ledger.PendingBatchJobs(ctx, p.db.Writer(), assembleLimit); err != nil {
			return 0, err
		}
	}
	now := p.clock.Now()
	groups := map[string][]ledger.PendingJob{}
	var order []string
	var toSync []ledger.PendingJob
	var stopped []stoppedJob
	pauses := pauseCache{} // for this sweep
	for _, j := range pending {
		if pr := p.profiles[j.ExtractionVersion]; pr != nil && len(pr.Parts) > 0 {
			continue // read after the fan-out above: the next sweep fans it out
		}
		r, err := p.route(ctx, gateJob{ID: j.ID, TenantID: j.TenantID, PolicyHash: j.PolicyHash,
			ExtractionVersion: j.ExtractionVersion, TextPurged: j.TextPurged}, pauses)
		if err != nil {
			return 0, err
		}
		switch r.kind {
		case routeSend:
			id := r.processor
			if p.batchProcessor(id) == nil {
				toSync = append(toSync, j)
				continue
			}
			if _, ok := groups[id]; !ok {
				order = append(order, id)
			}
			groups[id] = append(groups[id], j)
		case routeWait:
			// dispatch paused: the job waits in accepted
		case routeBlock, routeManual:
			stopped = append(stopped, stoppedJob{job: j, route: r})
		default:
			return 0, errUnknownRoute(j.ID, r)
		}
	}
	if len(toSync) > 0 || len(stopped) > 0 {
		if err := p.routeUnbatchable(ctx, toSync, stopped); err != nil {
			return 0, err
		}
	}
	created := 0
	for _, id := range order {
		g := groups[id]
		set := p.batchSettings(id)
		for len(g) > 0 && (len(g) >= set.MaxItems || flush || now.Sub(g[0].CreatedAt) >= set.MaxWait) {
			n := min(len(g), set.MaxItems)
			take := g[:n]
			g = g[n:]
			batchID := stet.NewID("bat", now)
			err := p.inTx(ctx, "batch.assemble", func(ctx context.Context, tx *sql.Tx) error {
				k, err := ledger.CreateBatch(ctx, tx, batchID, id, take, now)
				if err != nil || k == 0 {
					return err
				}
				created++
				_, err = p.river.InsertTx(ctx, tx, BatchArgs{BatchID: batchID}, nil)
				return err
			})
			if err != nil {
				return created, fmt.Errorf("assemble batch for processor %s: %w", id, err)
			}
			p.log.Info("batch assembled", "batch_id", batchID, "processor", id, "items", n)
		}
	}
	return created, nil
}

// overdueGrace is how long past its next poll an unfinished batch may go
// unlooked-at before the assembler gives it a new River job.
// A batch whose worker died is taken over within seconds (its lease by the
// liveness sweep, its River job enqueued again); this sweep is for River
// jobs lost otherwise, and needs no more than a minute.
const overdueGrace = time.Minute

// requeueOverdue enqueues a River job for every unfinished batch whose job
// was lost: a batch is never left waiting without one.
func (p *Pipeline) requeueOverdue(ctx context.Context) error {
	ids, err := ledger.OverdueBatches(ctx, p.db.Writer(), p.clock.Now(), overdueGrace, 100)
	if err != nil || len(ids) == 0 {
		return err
	}
	var inserts []river.InsertManyParams
	for _, id := range ids {
		inserts = append(inserts, river.InsertManyParams{Args: BatchArgs{BatchID: id}})
		p.log.Warn("batch overdue: its job is enqueued again", "batch_id", id)
	}
	return p.inTx(ctx, "batch.requeue_overdue", func(ctx context.Context, tx *sql.Tx) error {
		// Touch the batches so that the next sweep does not enqueue them
		// again before their new job has run.
		for _, id := range ids {
			if err := ledger.TouchBatch(ctx, tx, id, p.clock.Now()); err != nil {
				return err
			}
		}
		_, err := p.river.InsertManyTx(ctx, tx, inserts)
		return err
	})
}

// stoppedJob is a waiting batch-mode job the gate blocked or sent to
// manual review.
type stoppedJob struct {
	job   ledger.PendingJob
	route route
}

// routeUnbatchable sends batch-mode jobs whose processor has no batch API to
// synchronous extraction, and the jobs the gate stopped to blocked or
// manual.
func (p *Pipeline) routeUnbatchable(ctx context.Context, toSync []ledger.PendingJob, stopped []stoppedJob) error {
	now := p.clock.Now()
	var blocked []stoppedJob
	err := p.inTx(ctx, "batch.route_unbatchable", func(ctx context.Context, tx *sql.Tx) error {
		blocked = blocked[:0]
		var inserts []river.InsertManyParams
		for _, j := range toSync {
			routed, err := ledger.RouteToSync(ctx, tx, j.ID, now)
			if err != nil {
				return err
			}
			if routed {
				inserts = append(inserts, river.InsertManyParams{Args: ExtractArgs{JobID: j.ID}})
			}
		}
		for _, s := range stopped {
			var err error
			switch s.route.kind {
			case routeBlock:
				err = ledger.Block(ctx, tx, s.job.ID, s.job.Attempt, s.route.class, s.route.processor, s.route.reason, now)
				if err == nil {
					blocked = append(blocked, s)
				}
			case routeManual:
				_, err = p.db.MarkManual(ctx, tx, s.job.ID, s.job.Attempt, s.route.class, now)
			default:
				err = errUnknownRoute(s.job.ID, s.route)
			}
			if err != nil && !errors.Is(err, stet.ErrLeaseLost) {
				return err
			}
		}
		if len(inserts) == 0 {
			return nil
		}
		_, err := p.river.InsertManyTx(ctx, tx, inserts)
		return err
	})
	if err != nil {
		return err
	}
	for _, s := range blocked {
		p.alertBlocked(p.log.With("job_id", s.job.ID), s.route)
	}
	return nil
}

// runBatch moves one batch forward: submit, poll, or apply. It returns a
// metric label and what River should do (nil: done; a snooze: look again).
func (p *Pipeline) runBatch(ctx context.Context, batchID string) (string, error) {
	now := p.clock.Now()
	holder, lease := p.holder(), p.batchLeaseFor()
	b, err := ledger.ClaimBatchAs(ctx, p.db.Writer(), batchID, holder, now, lease)
	if errors.Is(err, ledger.ErrNotClaimable) {
		// Another run holds it: a live one renews its short lease, a dead
		// one's is taken over by the liveness sweep within seconds.
		return "held", river.JobSnooze(lease)
	}
	if err != nil {
		return "error", err
	}
	ctx, stopRenew := p.renewBatch(ctx, batchID, holder, lease)
	defer func() {
		stopRenew()
		_ = ledger.ReleaseBatchAs(context.WithoutCancel(ctx), p.db.Writer(), batchID, holder)
	}()
	log := p.log.With("batch_id", b.ID, "processor", b.ProcessorID)
	proc := p.batchProcessor(b.ProcessorID)
	if proc == nil {
		p.alert(log, "batch_processor_missing")
		return "blocked", river.JobSnooze(5 * time.Minute)
	}
	set := p.batchSettings(b.ProcessorID)
	var outcome string
	switch {
	case b.State == stet.BatchIntent:
		outcome, err = p.submitBatch(ctx, b, proc, set, log)
	case b.State == stet.BatchUnknown:
		return "unknown", nil // an operator decides: stet batch reconcile
	case b.State == stet.BatchSubmitted || b.State == stet.BatchInProgress:
		outcome, err = p.pollBatch(ctx, b, proc, set, log)
	case b.State.Terminal() && b.AppliedAt.IsZero():
		outcome, err = p.applyBatch(ctx, b, proc, set, log)
	default:
		return "done", nil
	}
	// Whatever the batch waits for next, the time it is looked at again is
	// durable and visible (stet batch list), and it keeps the assembler
	// from taking the batch for one whose job was lost.
	var snooze *river.JobSnoozeError
	if errors.As(err, &snooze) {
		if serr := ledger.SetNextPoll(ctx, p.db.Writer(), b.ID, p.clock.Now().Add(snooze.Duration), p.clock.Now(), false); serr != nil {
			return "error", serr
		}
	}
	return outcome, err
}

// errBatchLeaseLost cancels a batch run whose lease another run took.
var errBatchLeaseLost = errors.New("batch lease lost")

// renewBatch renews holder's short lease on a batch every heartbeat while
// the run lasts (a submit, a poll, an apply). If the lease is lost (this
// process was taken for dead), the returned context is cancelled: the run
// stops, and what it wrote stays fenced (submission markers, applied_at).
// stop ends the renewal.
func (p *Pipeline) renewBatch(ctx context.Context, batchID, holder string, lease time.Duration) (context.Context, func()) {
	rctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(p.cfg.Heartbeat)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				wctx, c := context.WithTimeout(context.WithoutCancel(ctx), lease)
				err := ledger.RenewBatch(wctx, p.db.Writer(), batchID, holder, p.clock.Now(), lease)
				c()
				if errors.Is(err, stet.ErrLeaseLost) {
					p.log.Warn("batch lease lost to another run; this run stops", "batch_id", batchID)
					cancel(errBatchLeaseLost)
					return
				}
			}
		}
	}()
	return rctx, func() {
		close(done)
		<-finished
		cancel(nil)
	}
}

// pollDelay is the backoff after n polls: PollFirst doubling to PollMax.
func pollDelay(set BatchSettings, n int) time.Duration {
	d := set.PollFirst
	for i := 0; i < n && d < set.PollMax; i++ {
		d *= 2
	}
	return min(d, set.PollMax)
}

// ambiguous reports whether a failed creating call may have created the
// batch: anything but a definitive refusal from the provider.
func ambiguous(err error) bool {
	var pe *stet.ProcessorError
	if !errors.As(err, &pe) {
		return true
	}
	switch pe.Class {
	case stet.FailureRateLimited, stet.FailureQuota, stet.FailureAuth, stet.FailureUnsupported, stet.FailureBoundary:
		return pe.StatusCode == 0 // a classified answer without a status came from no response
	}
	return true
}

func (p *Pipeline) submitBatch(ctx context.Context, b *ledger.Batch, proc stet.BatchProcessor, set BatchSettings, log *slog.Logger) (string, error) {
	now := p.clock.Now()
	info := proc.BatchInfo()
	if !b.SubmitStartedAt.IsZero() && info.IdempotentSubmit && now.Sub(b.SubmitStartedAt) > idempotencyWindow {
		// Past the provider's dedup window the same key would create a
		// second batch: an operator decides.
		if err := ledger.MarkUnknown(ctx, p.db.Writer(), b.ID, "an interrupted submission is older than the provider's idempotency window", now); err != nil {
			return "error", err
		}
		p.alert(log, "batch_unknown")
		return "unknown", nil
	}
	if !b.SubmitStartedAt.IsZero() && !info.IdempotentSubmit {
		// An earlier submission may have reached the provider: reconcile
		// before anything is sent again.
		found, err := proc.FindBatch(ctx, stet.BatchQuery{BatchID: b.ID, SubmittedAt: b.SubmitStartedAt,
			ItemCount: b.ItemCount, InputFileID: b.InputFileID})
		if err != nil {
			class := stet.ClassOf(err)
			log.Warn("batch reconciliation lookup failed", "failure_class", string(class))
			d := max(stet.RetryAfterOf(err), pollDelay(set, 0)/6, time.Second)
			return "reconcile_failed", river.JobSnooze(d)
		}
		if len(found) != 1 {
			reason := fmt.Sprintf("an interrupted submission could not be reconciled: %d matching provider batches", len(found))
			if err := ledger.MarkUnknown(ctx, p.db.Writer(), b.ID, reason, now); err != nil {
				return "error", err
			}
			p.alert(log, "batch_unknown", "matches", len(found))
			return "unknown", nil
		}
		if err := p.persistSubmitted(ctx, b.ID, found[0], now.Add(set.PollFirst)); err != nil {
			return "error", err
		}
		log.Info("batch reconciled with the provider's batch")
		return "reconciled", river.JobSnooze(set.PollFirst)
	}

	items, err := ledger.BatchItems(ctx, p.db.Writer(), b.ID)
	if err != nil {
		return "error", err
	}
	// Every item passes the boundary gate again: the policy, the config or
	// a pause may have changed since assembly. All are decided before
	// anything is written, so that a pause (a wait for any item) holds the
	// whole batch: nothing is sent while the processor, or a tenant with
	// items in it, is paused.
	type decided struct {
		item ledger.BatchItem
		work *ledger.WorkItem
		r    route
	}
	var todo []decided
	pauses := pauseCache{}
	for _, it := range items {
		if it.Applied {
			continue
		}
		work, err := p.db.LoadWork(ctx, p.db.Reader(), it.JobID)
		if err != nil {
			return "error", err
		}
		g := gateJobOf(work)
		g.Processor = b.ProcessorID
		r, err := p.route(ctx, g, pauses)
		if err != nil {
			return "error", err
		}
		if r.kind == routeWait {
			return "paused", river.JobSnooze(r.wait)
		}
		todo = append(todo, decided{it, work, r})
	}
	var reqs []stet.BatchItem
	var subs []ledger.SubmitItem
	for _, d := range todo {
		switch d.r.kind {
		case routeSend:
		case routeBlock, routeManual:
			// Nothing of this job may leave: it leaves the batch before
			// submission, blocked or manual, and is never sent.
			if err := p.dropItem(ctx, b.ID, d.item, d.r); err != nil {
				return "error", err
			}
			continue
		default:
			return "error", errUnknownRoute(d.item.JobID, d.r)
		}
		params, sent, err := p.prepare(d.r.recorded, d.r.profile, d.r.proc, d.item.JobID, d.work.Text)
		if err != nil {
			return "error", err
		}
		params.Attempt = d.item.Token
		reqs = append(reqs, stet.BatchItem{JobID: d.item.JobID, Params: params})
		subs = append(subs, ledger.SubmitItem{JobID: d.item.JobID, Token: d.item.Token, InputSHA256: sent.SHA256()})
	}
	if len(reqs) == 0 {
		if err := ledger.FinishApply(ctx, p.db.Writer(), b.ID, now); err != nil {
			return "error", err
		}
		return "empty", nil
	}

	started := false
	callCtx, span := p.startBatchCall(ctx, "submit", b.ProcessorID, b.ID)
	h, err := proc.SubmitBatch(callCtx, stet.BatchSubmit{
		BatchID: b.ID, Items: reqs, InputFileID: b.InputFileID,
		BeforeCreate: func(ctx context.Context, fileID string) error {
			err := p.inTx(ctx, "batch.submit_started", func(ctx context.Context, tx *sql.Tx) error {
				return ledger.MarkSubmitStarted(ctx, tx, b.ID, b.ProcessorID, fileID, subs, p.clock.Now())
			})
			started = err == nil
			if started {
				crash.Point(crash.BeforeBatchCreate)
			}
			return err
		},
	})
	endBatchCall(span, err)
	crash.Point(crash.AfterBatchSubmit)
	if err != nil {
		class := stet.ClassOf(err)
		p.cfg.Metrics.ProviderCalls.WithLabelValues(b.ProcessorID, string(class)).Inc()
		log.Warn("batch submission failed", "failure_class", string(class), "ambiguous", started && ambiguous(err))
		switch {
		case class == stet.FailureStore:
			// The provider holds this key with another body: never resend.
			if merr := ledger.MarkUnknown(ctx, p.db.Writer(), b.ID, "the provider reports an idempotency conflict for this batch", now); merr != nil {
				return "error", merr
			}
			p.alert(log, "batch_unknown", "failure_class", string(class))
			return "unknown", nil
		case started && ambiguous(err):
			// Maybe created: the next run reconciles (or resends the same
			// key), soon.
			return "ambiguous", river.JobSnooze(max(stet.RetryAfterOf(err), 2*time.Second))
		case started:
			if cerr := ledger.ClearSubmitStarted(ctx, p.db.Writer(), b.ID, now); cerr != nil {
				return "error", cerr
			}
		}
		switch class {
		case stet.FailureAuth, stet.FailureQuota:
			if perr := p.pauseProcessor(ctx, b.ProcessorID, class); perr != nil {
				return "error", perr
			}
			p.alert(log, "processor_paused", "failure_class", string(class))
			return "paused", river.JobSnooze(p.cfg.PausedRecheck)
		case stet.FailureUnsupported, stet.FailureBoundary:
			// The provider refused this batch for good (an invalid request):
			// sending it again would be refused again. Its items go to
			// synchronous extraction, within their transient budget.
			if ferr := ledger.MarkBatchRejected(ctx, p.db.Writer(), b.ID, now); ferr != nil {
				return "error", ferr
			}
			p.alert(log, "batch_rejected", "failure_class", string(class))
			nb, gerr := ledger.GetBatch(ctx, p.db.Writer(), b.ID)
			if gerr != nil {
				return "error", gerr
			}
			return p.applyBatch(ctx, nb, proc, set, log)
		}
		// Nothing was created: try again later, backing off like a poll.
		d := max(stet.RetryAfterOf(err), pollDelay(set, b.PollCount))
		if serr := ledger.SetNextPoll(ctx, p.db.Writer(), b.ID, now.Add(d), now, true); serr != nil {
			return "error", serr
		}
		return "failed", river.JobSnooze(d)
	}
	p.cfg.Metrics.ProviderCalls.WithLabelValues(b.ProcessorID, "ok").Inc()
	if err := p.persistSubmitted(ctx, b.ID, *h, now.Add(set.PollFirst)); err != nil {
		return "error", err
	}
	log.Info("batch submitted", "items", len(reqs))
	return "submitted", river.JobSnooze(set.PollFirst)
}

// persistSubmitted stores the provider's batch ID, retrying a failed write:
// the batch exists at the provider now, and the write must not be lost to a
// passing database error (a crash here is reconciled on the next run).
func (p *Pipeline) persistSubmitted(ctx context.Context, batchID string, h stet.BatchHandle, nextPoll time.Time) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	var err error
	for try := 0; wctx.Err() == nil; try++ {
		if try > 0 {
			select {
			case <-time.After(min(time.Duration(50<<min(try, 6))*time.Millisecond, 2*time.Second)):
			case <-wctx.Done():
			}
		}
		err = ledger.MarkSubmitted(wctx, p.db.Writer(), batchID, h, nextPoll, p.clock.Now())
		if err == nil || stet.ErrorCodeOf(err) == stet.EConflict {
			return err
		}
	}
	return err
}

// dropItem takes an item out of a batch before submission, as the gate
// decided (r): its job is blocked or manual, with r's class.
func (p *Pipeline) dropItem(ctx context.Context, batchID string, it ledger.BatchItem, r route) error {
	var applyRoute string
	switch r.kind {
	case routeBlock:
		applyRoute = "blocked"
	case routeManual:
		applyRoute = "manual"
	default:
		return errUnknownRoute(it.JobID, r)
	}
	now := p.clock.Now()
	err := p.inTx(ctx, "batch.drop_item", func(ctx context.Context, tx *sql.Tx) error {
		_, err := p.db.ApplyBatchItem(ctx, tx, ledger.ApplyItem{BatchID: batchID, Item: it, Route: applyRoute,
			Result: ledger.AttemptResult{Status: stet.AttemptFailed, FailureClass: r.class, Now: now}, Now: now})
		return err
	})
	if err == nil && r.kind == routeBlock {
		p.alertBlocked(p.log.With("job_id", it.JobID, "batch_id", batchID), r)
	}
	return err
}

func (p *Pipeline) pollBatch(ctx context.Context, b *ledger.Batch, proc stet.BatchProcessor, set BatchSettings, log *slog.Logger) (string, error) {
	now := p.clock.Now()
	callCtx, cancel := context.WithTimeout(ctx, p.cfg.JobTimeout)
	callCtx, span := p.startBatchCall(callCtx, "status", b.ProcessorID, b.ID)
	st, err := proc.BatchStatus(callCtx, b.ProviderBatchID)
	endBatchCall(span, err)
	cancel()
	if err != nil {
		class := stet.ClassOf(err)
		var pe *stet.ProcessorError
		if errors.As(err, &pe) && pe.Code == "batch_not_found" {
			if merr := ledger.MarkUnknown(ctx, p.db.Writer(), b.ID, "the provider does not know this batch", now); merr != nil {
				return "error", merr
			}
			p.alert(log, "batch_unknown", "failure_class", string(class))
			return "unknown", nil
		}
		// A 429 or a failed lookup is a reason to wait, never to submit.
		d := max(stet.RetryAfterOf(err), pollDelay(set, b.PollCount))
		log.Warn("batch status lookup failed", "failure_class", string(class), "next_poll_in", d.String())
		if err := ledger.SetNextPoll(ctx, p.db.Writer(), b.ID, now.Add(d), now, true); err != nil {
			return "error", err
		}
		return "poll_failed", river.JobSnooze(d)
	}
	d := pollDelay(set, b.PollCount+1)
	if err := ledger.RecordPoll(ctx, p.db.Writer(), b.ID, st, now.Add(d), now); err != nil {
		return "error", err
	}
	if !st.State.Terminal() {
		return "polled", river.JobSnooze(d)
	}
	log.Info("batch ended at the provider", "state", string(st.State))
	nb, err := ledger.GetBatch(ctx, p.db.Writer(), b.ID)
	if err != nil {
		return "error", err
	}
	return p.applyBatch(ctx, nb, proc, set, log)
}

// idempotencyWindow is how long after an interrupted submission a provider
// that deduplicates by Idempotency-Key may be resent the same key (Infrai
// keeps keys 24 h; an hour of margin).
const idempotencyWindow = 23 * time.Hour

// applyChunk is how many items one apply transaction holds.
const applyChunk = 200

func (p *Pipeline) applyBatch(ctx context.Context, b *ledger.Batch, proc stet.BatchProcessor, set BatchSettings, log *slog.Logger) (string, error) {
	now := p.clock.Now()
	items, err := ledger.BatchItems(ctx, p.db.Writer(), b.ID)
	if err != nil {
		return "error", err
	}
	byJob := make(map[string]stet.BatchResult, len(items))
	if b.State != stet.BatchFailed {
		st := &stet.BatchStatus{ProviderID: b.ProviderBatchID, ProviderState: b.ProviderState, State: b.State,
			InputFileID: b.InputFileID, OutputFileID: b.OutputFileID, ErrorFileID: b.ErrorFileID, ResultsURL: b.ResultsURL,
			ResultsExpireAt: b.ResultsExpireAt}
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		callCtx, span := p.startBatchCall(callCtx, "results", b.ProcessorID, b.ID)
		results, err := proc.BatchResults(callCtx, st)
		endBatchCall(span, err)
		cancel()
		if err != nil {
			if b.ResultsExpireAt.IsZero() || !now.After(b.ResultsExpireAt) {
				log.Warn("batch results fetch failed", "failure_class", string(stet.ClassOf(err)))
				return "fetch_failed", river.JobSnooze(max(stet.RetryAfterOf(err), pollDelay(set, 0)))
			}
			// Gone with the provider's retention: every unapplied item is
			// extracted again (no result is applied from nothing).
			p.alert(log, "batch_results_expired")
		}
		mine := make(map[string]bool, len(items))
		for _, it := range items {
			mine[it.JobID] = true
		}
		for _, r := range results {
			if !mine[r.JobID] {
				// Not our batch after all (a reconciliation matched the
				// wrong one): apply nothing, ask an operator.
				if err := ledger.MarkUnknown(ctx, p.db.Writer(), b.ID, "the provider batch holds items this batch does not", now); err != nil {
					return "error", err
				}
				p.alert(log, "batch_unknown")
				return "unknown", nil
			}
			byJob[r.JobID] = r
		}
	}
	var pending []ledger.BatchItem
	for _, it := range items {
		if !it.Applied {
			pending = append(pending, it)
		}
	}
	counts := map[string]int{}
	for start := 0; start < len(pending); start += applyChunk {
		chunk := pending[start:min(start+applyChunk, len(pending))]
		err := p.inTx(ctx, "batch.apply", func(ctx context.Context, tx *sql.Tx) error {
			var inserts []river.InsertManyParams
			for _, it := range chunk {
				a, args := p.itemOutcome(b, it, byJob[it.JobID], set)
				outcome, err := p.db.ApplyBatchItem(ctx, tx, a)
				if err != nil {
					return err
				}
				counts[outcome]++
				if outcome == ledger.ApplySucceeded {
					// The record with the artifact; the record stage only if that fails.
					recordID, err := p.recordInTx(ctx, tx, it.JobID)
					if err != nil {
						return err
					}
					if recordID != "" {
						continue
					}
				}
				if (outcome == ledger.ApplySucceeded || outcome == ledger.ApplyFailed) && args != nil {
					inserts = append(inserts, river.InsertManyParams{Args: args})
				}
			}
			if len(inserts) > 0 {
				if _, err := p.river.InsertManyFastTx(ctx, tx, inserts); err != nil {
					return fmt.Errorf("enqueue next stages: %w", err)
				}
			}
			return nil
		})
		if err != nil {
			return "error", fmt.Errorf("apply batch items: %w", err)
		}
		crash.Point(crash.MidApply)
	}
	if err := ledger.FinishApply(ctx, p.db.Writer(), b.ID, p.clock.Now()); err != nil {
		return "error", err
	}
	log.Info("batch applied", "succeeded", counts[ledger.ApplySucceeded], "failed", counts[ledger.ApplyFailed],
		"superseded", counts[ledger.ApplySuperseded], "discarded", counts[ledger.ApplyDiscarded], "skipped", counts[ledger.ApplySkipped])
	return "applied", nil
}

// itemOutcome decides what one item's result does to its job, and the
// River job to enqueue with it (nil for none).
func (p *Pipeline) itemOutcome(b *ledger.Batch, it ledger.BatchItem, r stet.BatchResult, set BatchSettings) (ledger.ApplyItem, river.JobArgs) {
	now := p.clock.Now()
	a := ledger.ApplyItem{BatchID: b.ID, Item: it, Now: now,
		Result: ledger.AttemptResult{Status: stet.AttemptSucceeded, Now: now}}
	var err error
	rejected := false
	switch {
	case b.State == stet.BatchFailed && b.ProviderState == ledger.ProviderStateRejected:
		err = &stet.ProcessorError{Class: stet.FailureTransient, Code: "batch_rejected"}
		rejected = true
	case b.State == stet.BatchFailed:
		err = &stet.ProcessorError{Class: stet.FailureTransient, Code: "batch_failed"}
	case r.JobID == "":
		err = &stet.ProcessorError{Class: stet.FailureTransient, Code: stet.CodeBatchItemExpired}
	case r.Err != nil:
		err = r.Err
	}
	ext := r.Extraction
	if ext != nil {
		a.Result.Model, a.Result.RequestID, a.Result.StatusCode = ext.Model, ext.RequestID, ext.StatusCode
		a.Result.InputTokens, a.Result.OutputTokens, a.Result.ReportedCostUSD = ext.InputTokens, ext.OutputTokens, ext.CostUSD
		p.countCost(b.ProcessorID, ext, true)
	}
	profile := p.profiles[it.ExtractionVersion]
	if err == nil && ext != nil && profile != nil {
		if problems := profile.Validator.Validate(ext.Output); len(problems) > 0 {
			err = &stet.ProcessorError{Class: stet.FailureInvalidOutput, Code: "schema"}
		}
	} else if err == nil {
		err = &stet.ProcessorError{Class: stet.FailureUnsupported, Code: "no_profile"}
	}
	class := stet.ClassOf(err)
	label := string(class)
	if err == nil {
		label = "ok"
	}
	p.cfg.Metrics.ProviderCalls.WithLabelValues(b.ProcessorID, label).Inc()
	if err == nil {
		a.Artifact = &ledger.SaveArtifactParams{JobID: it.JobID, Token: it.Token, AttemptN: it.AttemptN, Raw: ext.Raw,
			Output: ext.Output, SchemaVersion: profile.ExtractionVersion(), ProcessorID: b.ProcessorID, Model: ext.Model, Now: now}
		return a, RecordArgs{JobID: it.JobID}
	}
	a.Result.Status, a.Result.FailureClass = stet.AttemptFailed, class
	switch class {
	case stet.FailureRefusal, stet.FailureUnsupported:
		a.Route = "manual"
		return a, nil
	case stet.FailureInvalidOutput:
		// A re-ask: synchronous extraction, with its own repair budget.
		a.Route = "sync"
		return a, ExtractArgs{JobID: it.JobID}
	}
	// Expired, cancelled, transient, rate-limited and the rest: extraction
	// again, within the transient budget.
	if class == stet.FailureTransient && it.TransientFails+1 >= p.cfg.MaxAttempts {
		a.Route = "manual"
		return a, nil
	}
	if class != stet.FailureTransient {
		a.Result.FailureClass = stet.FailureTransient
	}
	if set.OnExpired == stet.ModeSync || rejected {
		a.Route = "sync"
		return a, ExtractArgs{JobID: it.JobID}
	}
	a.Route = "batch"
	return a, nil
}

// pauseProcessor pauses dispatch to a processor after quota or auth, and
// opens its processor.paused alert in the same transaction.
func (p *Pipeline) pauseProcessor(ctx context.Context, processorID string, class stet.FailureClass) error {
	_, err := p.db.PauseForFailure(ctx, ledger.Pause{Scope: "processor:" + processorID,
		Reason: string(class) + " failure of a batch submission (automatic)", PausedBy: "stet", PausedAt: p.clock.Now()}, processorID, class)
	return err
}

// ReconcileBatch records an operator's decision about an unknown batch:
// adopt the provider's batch providerID, or resubmit (nothing was created).
// The decision is audit-logged.
func (p *Pipeline) ReconcileBatch(ctx context.Context, batchID, adopt string, resubmit bool, actor string) error {
	b, err := ledger.GetBatch(ctx, p.db.Writer(), batchID)
	if err != nil {
		return err
	}
	if b.State != stet.BatchUnknown && !(b.State == stet.BatchIntent && !b.SubmitStartedAt.IsZero()) {
		return stet.Errorf(stet.EConflict, "batch %s is %s: only an unknown batch is reconciled by an operator", b.ID, b.State)
	}
	now := p.clock.Now()
	action := "batch.reconcile.resubmit"
	err = p.inTx(ctx, "batch.reconcile", func(ctx context.Context, tx *sql.Tx) error {
		if adopt != "" {
			action = "batch.reconcile.adopt"
			if err := ledger.MarkSubmitted(ctx, tx, b.ID, stet.BatchHandle{ProviderID: adopt}, now, now); err != nil {
				return err
			}
		} else if resubmit {
			if err := ledger.ResetForResubmit(ctx, tx, b.ID, now); err != nil {
				return err
			}
		}
		if err := ledger.Audit(ctx, tx, ledger.AuditEntry{Tenant: "*", Actor: actor, Action: action,
			ObjectType: "batch", ObjectID: b.ID, Now: now}); err != nil {
			return err
		}
		_, err := p.river.InsertTx(ctx, tx, BatchArgs{BatchID: b.ID}, nil)
		return err
	})
	return err
}

// RunBatch moves one batch forward once, as its River job would: submit,
// poll, or fetch and apply. For operator commands and tests; the batch's
// River job keeps running on its own schedule.
func (p *Pipeline) RunBatch(ctx context.Context, batchID string) (string, error) {
	outcome, err := p.runBatch(ctx, batchID)
	var snooze *river.JobSnoozeError
	if errors.As(err, &snooze) {
		err = nil
	}
	return outcome, err
}
