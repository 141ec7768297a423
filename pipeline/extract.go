package pipeline

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/riverqueue/river"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/admission"
	"github.com/stetlabs/stet/boundary"
	"github.com/stetlabs/stet/internal/crash"
	"github.com/stetlabs/stet/ledger"
)

type extractWorker struct {
	river.WorkerDefaults[ExtractArgs]
	p *Pipeline
}

// NextRetry is exponential backoff with jitter for transient failures,
// from the injected clock.
func (w *extractWorker) NextRetry(job *river.Job[ExtractArgs]) time.Time {
	return w.p.clock.Now().Add(w.p.backoff(job.Attempt))
}

// Work runs the stage. The stage metric measures elapsed time on the
// monotonic clock: it is a duration of real work, not a time of the ledger.
func (w *extractWorker) Work(ctx context.Context, job *river.Job[ExtractArgs]) error {
	start := time.Now()
	outcome, err := w.p.extract(ctx, job)
	w.p.cfg.Metrics.StageDuration.WithLabelValues("extract", outcome).Observe(time.Since(start).Seconds())
	return err
}

// backoff is base·2^(n-1), ±25 % jitter, capped.
func (p *Pipeline) backoff(n int) time.Duration {
	d := p.cfg.RetryBase
	for i := 1; i < n && d < p.cfg.RetryMax; i++ {
		d *= 2
	}
	d = min(d, p.cfg.RetryMax)
	jitter := time.Duration(rand.Int64N(int64(d)/2+1)) - d/4
	return max(d+jitter, time.Millisecond)
}

// leaseFor is how long a claim holds a job: past the stage timeout, so a
// live worker is never fenced out by its own slowness, and less than River's
// rescue, so a rescued job finds the lease expired.
func (p *Pipeline) leaseFor() time.Duration { return p.cfg.JobTimeout + 5*time.Second }

// extract runs the extract stage once. It returns an outcome label for the
// stage metric and the error River acts on: nil (done), a snooze, or an
// error (retry with backoff).
func (p *Pipeline) extract(ctx context.Context, job *river.Job[ExtractArgs]) (string, error) {
	jobID := job.Args.JobID
	log := p.log.With("job_id", jobID, "stage", "extract")
	// Read from the read pool: what happens next is fenced on the attempt
	// token by the claim, so a read never needs the single writer.
	work, err := p.db.LoadWork(ctx, p.db.Reader(), jobID)
	if err != nil {
		return "error", fmt.Errorf("load job %s: %w", jobID, err)
	}
	j := &work.Job
	log = log.With("report_id", j.ReportID, "revision", j.Revision, "tenant", j.TenantID, "source", j.SourceID)
	now := p.clock.Now()

	if work.AwaitsTranscript {
		// An audio report: its transcript first (transcribe.go), once per
		// revision, before any part or processor sees text.
		switch {
		case j.State == stet.JobAccepted || j.State == stet.JobWaiting:
			return p.transcribeStep(ctx, job, work, log)
		case j.State == stet.JobExtracting && (j.LeaseUntil.IsZero() || !j.LeaseUntil.After(now)):
			return p.transcribeStep(ctx, job, work, log)
		}
	}

	if profile := p.profiles[j.ExtractionVersion]; profile != nil && len(profile.Parts) > 0 {
		// A profile with parts: its job never goes to a processor; its
		// parts' jobs do.
		if j.State != stet.JobAccepted && j.State != stet.JobWaiting {
			return "noop", nil // fanned out (its parts hold it), or settled
		}
		return p.fanOut(ctx, job, j, profile)
	}

	switch j.State {
	case stet.JobAccepted, stet.JobWaiting:
	case stet.JobExtracting:
		if !j.LeaseUntil.IsZero() && j.LeaseUntil.After(now) {
			// Another worker holds the job. Look again when its lease ends;
			// if it finished, there is nothing left to do.
			return "held", river.JobSnooze(j.LeaseUntil.Sub(now) + 100*time.Millisecond)
		}
	case stet.JobExtracted:
		// The artifact exists: never call the processor again. Make sure the
		// record stage is queued; a second record job finds the job committed.
		return "resumed", p.inTx(ctx, "extract.resume_commit", func(ctx context.Context, tx *sql.Tx) error {
			if _, err := p.river.InsertTx(ctx, tx, RecordArgs{JobID: jobID}, nil); err != nil {
				return err
			}
			return completeTx(ctx, tx, job)
		})
	case stet.JobCommitted, stet.JobManual, stet.JobCancelled, stet.JobBlocked, stet.JobBatched:
		return "noop", nil
	default:
		return "error", fmt.Errorf("job %s: unknown state %q", jobID, j.State)
	}

	// The boundary gate: the policy recorded at acceptance decides where the
	// text may go, and the policy in force must still permit it.
	r, err := p.route(ctx, gateJobOf(work), nil)
	if err != nil {
		return "error", err
	}
	switch r.kind {
	case routeSend:
	case routeWait:
		// Send nothing, spend no attempt, look again later.
		if err := p.markWaiting(ctx, j, now); err != nil {
			return "error", err
		}
		return "paused", river.JobSnooze(r.wait)
	case routeBlock:
		p.alertBlocked(log, r)
		return "blocked", p.block(ctx, job, j.Attempt, r.class, r.processor, r.reason)
	case routeManual:
		return "manual", p.manualAfter(ctx, attempt{job: job, token: -1, result: ledger.AttemptResult{FailureClass: r.class}, log: log,
			sourceID: j.SourceID, accepted: j.CreatedAt, profile: r.profile})
	default:
		return "error", errUnknownRoute(jobID, r)
	}
	processorID, proc, profile := r.processor, r.proc, r.profile

	params, sent, err := p.prepare(r.recorded, profile, proc, jobID, work.Text)
	if err != nil {
		return "error", err
	}

	// Admission toward the provider's limits, before the claim: a request
	// that must wait spends no attempt and holds no lease; the job snoozes.
	est := admission.EstimateTokens(sent.Reveal(), estimatedOutputTokens)
	// The day's budget first: at the cap the processor pauses itself and
	// the job waits like any paused job, spending nothing.
	release, within, err := p.reserveBudget(ctx, log, processorID, est)
	if err != nil {
		return "error", err
	}
	if !within {
		if err := p.markWaiting(ctx, j, now); err != nil {
			return "error", err
		}
		return "paused", river.JobSnooze(p.cfg.PausedRecheck)
	}
	defer release()
	r = p.admitRoute(ctx, r, est)
	now = p.clock.Now()
	switch r.kind {
	case routeSend:
	case routeWait:
		if err := p.markWaiting(ctx, j, now); err != nil {
			return "error", err
		}
		return "throttled", river.JobSnooze(r.wait)
	default:
		return "error", errUnknownRoute(jobID, r)
	}
	ticket := r.ticket

	var token int64
	var n int
	// The claim returns once it is durable, before any call is made. On
	// SQLite it is group-committed with other workers' claims and results;
	// on PostgreSQL it is one statement that commits on its own.
	claim := ledger.ClaimParams{
		JobID: jobID, Expected: j.Attempt, Now: now, LeaseFor: p.leaseFor(), Holder: p.holder(),
		ProcessorID: processorID, InputSHA256: sent.SHA256(),
	}
	run := func(ctx context.Context, q ledger.Querier) (err error) {
		token, n, err = p.db.Claim(ctx, q, claim)
		return err
	}
	if !p.db.OneWriter() {
		err = p.inStatement(ctx, "extract.claim", run)
	} else {
		err = p.grouped(ctx, "extract.claim", j.ReportID, func(ctx context.Context, tx *sql.Tx) error { return run(ctx, tx) })
	}
	if err != nil {
		ticket.Done(0, false, 0) // nothing was sent
	}
	if errors.Is(err, ledger.ErrNotClaimable) {
		// Someone else moved the job since we read it; look again shortly.
		return "held", river.JobSnooze(250 * time.Millisecond)
	}
	if err != nil {
		return "error", fmt.Errorf("claim job %s: %w", jobID, err)
	}
	params.Attempt = token
	log = log.With("attempt", token, "processor", processorID)
	log.Debug("extract claimed")

	for repairs := 0; ; repairs++ {
		if repairs > 0 {
			// A repair is another request: it waits its turn inside the
			// stage, which holds the claim.
			if ticket, err = p.admitWait(ctx, processorID, est); err != nil {
				return "error", err
			}
		}
		crash.Point(crash.MidCall)
		callCtx, cancel := context.WithTimeout(ctx, p.cfg.JobTimeout)
		callCtx, span := p.startCall(callCtx, processorID, proc, jobID, token, repairs)
		ext, callErr := proc.Extract(callCtx, params)
		cancel()
		ticket.Done(usedTokens(ext, callErr), stet.ClassOf(callErr) == stet.FailureRateLimited, stet.RetryAfterOf(callErr))
		if ext != nil {
			p.countCost(processorID, ext, false)
		}
		if callErr == nil {
			if problems := profile.Validator.Validate(ext.Output); len(problems) > 0 {
				callErr = &stet.ProcessorError{Class: stet.FailureInvalidOutput, StatusCode: ext.StatusCode, RequestID: ext.RequestID,
					Output: ext.Output, Problems: problems}
			}
		}
		endCall(span, ext, callErr)
		class := stet.ClassOf(callErr)
		label := string(class)
		if callErr == nil {
			label = "ok"
		}
		p.cfg.Metrics.ProviderCalls.WithLabelValues(processorID, label).Inc()
		result := attemptResult(jobID, n, ext, callErr, p.clock.Now())
		if callErr != nil && ctx.Err() != nil && p.stopping.Load() {
			return p.releaseForShutdown(ctx, job, token, n, log)
		}

		a := attempt{job: job, reportID: j.ReportID, sourceID: j.SourceID, token: token, processor: processorID, policyHash: j.PolicyHash,
			transientFails: work.TransientFails, profile: profile, result: result, log: log, accepted: j.CreatedAt}
		if callErr == nil {
			return p.saveArtifact(ctx, a, ext)
		}
		var pe *stet.ProcessorError
		errors.As(callErr, &pe)
		log.Warn("processor call failed", "failure_class", string(class), "status_code", result.StatusCode, "request_id", result.RequestID)

		if class == stet.FailureInvalidOutput && repairs < p.cfg.RepairBudget && pe != nil {
			// Re-ask with the validator's messages. The next call is its own
			// attempt, recorded before it is made.
			result.Status = stet.AttemptRepair
			err := p.inTx(ctx, "extract.repair", func(ctx context.Context, tx *sql.Tx) error {
				// A deletion may have cancelled the job during the call: no
				// repair call goes out for it.
				if err := ledger.HoldsJob(ctx, tx, jobID, token); err != nil {
					return err
				}
				if err := ledger.FinishAttempt(ctx, tx, result); err != nil {
					return err
				}
				var err error
				n, err = ledger.StartAttempt(ctx, tx, jobID, token, processorID, sent.SHA256(), p.clock.Now())
				return err
			})
			if errors.Is(err, stet.ErrLeaseLost) {
				if errors.Is(err, ledger.ErrCancelled) {
					_ = ledger.DiscardAttempt(ctx, p.db.Writer(), jobID, n, p.clock.Now())
				}
				return "superseded", nil
			}
			if err != nil {
				return "error", fmt.Errorf("record repair of job %s: %w", jobID, err)
			}
			params.Repair = append(params.Repair, stet.RepairTurn{Output: pe.Output, Problems: pe.Problems})
			continue
		}
		return p.failed(ctx, a, pe)
	}
}

// releaseForShutdown gives the job back when a graceful shutdown cancelled
// its call: the attempt becomes abandoned without a failure class (so it
// is not counted against max_attempts), the job is accepted again with no
// lease, and River snoozes it for the next process to take at once.
func (p *Pipeline) releaseForShutdown(ctx context.Context, job *river.Job[ExtractArgs], token int64, n int, log *slog.Logger) (string, error) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := p.inTx(wctx, "extract.release", func(wctx context.Context, tx *sql.Tx) error {
		return ledger.ReleaseForShutdown(wctx, tx, job.Args.JobID, token, n, p.clock.Now())
	})
	if err != nil && !errors.Is(err, stet.ErrLeaseLost) {
		return "error", err
	}
	log.Info("stage released for shutdown; its attempt is abandoned, not spent")
	return "released", river.JobSnooze(0)
}

// markWaiting records that a job waits (paused or throttled) without
// spending an attempt; a job already waiting is not written again.
func (p *Pipeline) markWaiting(ctx context.Context, j *stet.Job, now time.Time) error {
	if j.State == stet.JobWaiting {
		return nil
	}
	return ledger.MarkWaiting(ctx, p.db.Writer(), j.ID, j.Attempt, now)
}

func attemptResult(jobID string, n int, ext *stet.Extraction, err error, now time.Time) ledger.AttemptResult {
	r := ledger.AttemptResult{JobID: jobID, N: n, Now: now, Status: stet.AttemptSucceeded}
	if ext != nil {
		r.Model, r.RequestID, r.StatusCode = ext.Model, ext.RequestID, ext.StatusCode
		r.InputTokens, r.OutputTokens, r.Latency = ext.InputTokens, ext.OutputTokens, ext.Latency
		r.ReportedCostUSD = ext.CostUSD
	}
	if err != nil {
		r.Status = stet.AttemptFailed
		r.FailureClass = stet.ClassOf(err)
		var pe *stet.ProcessorError
		if errors.As(err, &pe) {
			if pe.StatusCode != 0 {
				r.StatusCode = pe.StatusCode
			}
			if pe.RequestID != "" {
				r.RequestID = pe.RequestID
			}
		}
	}
	return r
}

// attempt is one claimed extraction attempt: what its outcome is written
// against.
type attempt struct {
	job            *river.Job[ExtractArgs]
	reportID       string // the job's report: the stageGrouper's lock order
	sourceID       string
	token          int64  // the fencing token of the claim; -1 for a job no worker holds
	processor      string // the processor called
	policyHash     string // the policy recorded at acceptance
	transientFails int    // failed transient attempts before this one
	profile        *Profile
	result         ledger.AttemptResult // what the call returned, to record
	log            *slog.Logger
	accepted       time.Time // the job's acceptance, for stet_time_to_record_seconds
	transcribe     bool      // the call was the transcribe step's (transcribe.go)
}

// observeRecord records a review record's time from acceptance.
func (p *Pipeline) observeRecord(sourceID string, accepted time.Time) {
	if !accepted.IsZero() {
		p.cfg.Metrics.TimeToRecord.WithLabelValues(sourceID).Observe(p.clock.Now().Sub(accepted).Seconds())
	}
}

// saveArtifact stores a validated result fenced on the attempt token and,
// in the same transaction, commits it (the review record) or — when that
// part fails — enqueues the record stage, which retries from the artifact.
// A failed write is retried here from the result in memory, never by
// calling again. On PostgreSQL it first tries the whole result and its
// COMMIT in one round trip (ledger.SaveResultCommit).
func (p *Pipeline) saveArtifact(ctx context.Context, a attempt, ext *stet.Extraction) (string, error) {
	job, token, result, log := a.job, a.token, a.result, a.log
	jobID := job.Args.JobID
	// The call succeeded: finish the write even if the stage was cancelled,
	// retrying a failed write from the result in memory for as long as the
	// lease holds (after that a newer attempt may own the job).
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.leaseFor())
	defer cancel()
	var err error
	var recordID string
	var commitTook time.Duration
	saved := false // by SaveResultCommit, before the loop
	saveParams := func() ledger.SaveArtifactParams {
		return ledger.SaveArtifactParams{
			JobID: jobID, Token: token, AttemptN: result.N, Raw: ext.Raw, Output: ext.Output,
			SchemaVersion: a.profile.ExtractionVersion(), ProcessorID: a.processor, Model: ext.Model, Now: p.clock.Now(),
		}
	}
	{
		// The whole result (fence, artifact, attempt, review record) and
		// its COMMIT in one round trip, where the ledger can. Any other
		// outcome comes back as ErrSaveApart with nothing kept (at once
		// where the ledger cannot), and the loop below saves it in a
		// transaction and reads which it was.
		commitStart := time.Now()
		save := func(wctx context.Context, _ ledger.Querier) error {
			var err error
			recordID, err = p.db.SaveResultCommit(wctx, ledger.SaveResultParams{
				SaveArtifactParams: saveParams(), ReportID: a.reportID, SourceID: a.sourceID, Attempt: result,
				Commit: !crash.Armed(crash.MidCommit), Part: a.profile.Part != ""})
			if errors.Is(err, ledger.ErrSaveApart) {
				return nil // not a failure: recordID is empty, and the loop below saves it
			}
			return err
		}
		if p.db.OneWriter() {
			// Answered at once, sending nothing: the save's span is the
			// group transaction's below.
			err = save(wctx, nil)
		} else {
			err = p.inStatement(wctx, "extract.save_artifact", save)
		}
		commitTook = time.Since(commitStart)
		saved = err == nil && recordID != ""
		if err != nil {
			// Kept as the outcome if the lease runs out before the loop
			// below tries again.
			recordID = ""
			log.Warn("store artifact failed; retrying from the saved result", "failure_class", string(stet.FailureStore), "try", 0)
		}
	}
	for try := 0; !saved && wctx.Err() == nil; try++ {
		if try > 0 {
			select {
			case <-time.After(min(time.Duration(50<<min(try, 6))*time.Millisecond, 2*time.Second)):
			case <-wctx.Done():
			}
		}
		// Group-committed with other workers' results (stagegroup.go); it
		// returns once the group holding it has committed.
		err = p.grouped(wctx, "extract.save_artifact", a.reportID, func(wctx context.Context, tx *sql.Tx) error {
			save := saveParams()
			// Elapsed time for the commit metric, on the monotonic clock. On
			// PostgreSQL, when the record commits inside stet_save_result,
			// it is that whole call: the artifact's part cannot be told apart.
			commitStart := time.Now()
			// The fence, the artifact, the attempt and, unless a drill
			// takes the record stage, the review record where the ledger
			// saves it with them.
			var recorded bool
			var err error
			recordID, recorded, err = p.db.SaveResult(wctx, tx, ledger.SaveResultParams{
				SaveArtifactParams: save, ReportID: a.reportID, SourceID: a.sourceID, Attempt: result, Commit: !crash.Armed(crash.MidCommit),
				Part: a.profile.Part != ""})
			if err != nil {
				return err
			}
			if !recorded {
				commitStart = time.Now()
				if recordID, err = p.recordInTx(wctx, tx, jobID); err != nil {
					return err
				}
			}
			commitTook = time.Since(commitStart)
			if recordID == "" {
				if _, err := p.river.InsertTx(wctx, tx, RecordArgs{JobID: jobID}, nil); err != nil {
					return fmt.Errorf("enqueue commit: %w", err)
				}
			} else if !p.completeFinal() {
				return nil // River's completer marks the River job done when Work returns
			}
			return completeTx(wctx, tx, job)
		})
		if err == nil || errors.Is(err, stet.ErrLeaseLost) {
			break
		}
		log.Warn("store artifact failed; retrying from the saved result", "failure_class", string(stet.FailureStore), "try", try+1)
	}
	if errors.Is(err, ledger.ErrCancelled) {
		// The report was deleted while the call ran: the result is counted on
		// its attempt and discarded, never saved.
		err := p.db.InTx(wctx, func(tx *sql.Tx) error {
			if err := ledger.DiscardAttempt(wctx, tx, jobID, result.N, p.clock.Now()); err != nil {
				return err
			}
			return completeTx(wctx, tx, job)
		})
		if err != nil {
			return "error", err
		}
		log.Warn("result discarded: the job was cancelled by a deletion")
		return "discarded", nil
	}
	if errors.Is(err, stet.ErrLeaseLost) {
		// A newer attempt holds the job: our result is superseded, never the
		// artifact. Look again after that attempt's lease, in case it died.
		result.Status = stet.AttemptSuperseded
		if ferr := ledger.FinishAttempt(wctx, p.db.Writer(), result); ferr != nil {
			return "error", ferr
		}
		log.Warn("attempt superseded by a newer attempt")
		return "superseded", river.JobSnooze(p.leaseFor())
	}
	if err != nil {
		return "error", fmt.Errorf("store artifact of job %s: %w", jobID, err)
	}
	crash.Point(crash.AfterArtifact)
	if recordID == "" {
		log.Warn("review record left to the record stage", "failure_class", string(stet.FailureStore))
		return "extracted", nil
	}
	if recordID == ledger.PartSettled {
		log.Info("part saved; the record waits for the job's other parts")
		return "extracted", nil
	}
	p.cfg.Metrics.StageDuration.WithLabelValues("commit", "committed").Observe(commitTook.Seconds())
	p.observeRecord(a.sourceID, a.accepted)
	p.log.Info("review record committed", "job_id", jobID, "review_record_id", recordID, "stage", "commit")
	return "extracted", nil
}

// recordInTx runs the record stage inside tx, the transaction that saves
// the artifact, under a savepoint: the review record and the job's
// committed marker land with the artifact, and no commit job is needed. If
// the commit fails (a destination write refused), the savepoint is rolled
// back and it returns "" with no error: the caller enqueues the commit
// stage in the same transaction, which retries from the artifact. A drill
// of the record stage (STET_CRASH_AT=mid_commit) takes that stage always.
func (p *Pipeline) recordInTx(ctx context.Context, tx *sql.Tx, jobID string) (string, error) {
	if crash.Armed(crash.MidCommit) {
		return "", nil
	}
	var recordID string
	err := ledger.Savepoint(ctx, tx, "inline_commit", func() error {
		var err error
		recordID, err = p.db.WriteRecord(ctx, tx, jobID, p.clock.Now())
		return err
	})
	if errors.Is(err, ledger.ErrSavepoint) {
		return "", err
	}
	if err != nil {
		return "", nil // rolled back: the record stage retries from the artifact
	}
	return recordID, nil
}

// failed acts on a classified failure of attempt a; pe is the processor's
// error, when it returned one.
func (p *Pipeline) failed(ctx context.Context, a attempt, pe *stet.ProcessorError) (string, error) {
	job, token, processorID, result := a.job, a.token, a.processor, a.result
	jobID := job.Args.JobID
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	class := result.FailureClass
	if errors.Is(ledger.HoldsJob(wctx, p.db.Writer(), jobID, token), ledger.ErrCancelled) {
		// Deleted during the call: count the attempt, keep nothing of it.
		err := p.db.InTx(wctx, func(tx *sql.Tx) error {
			if err := ledger.DiscardAttempt(wctx, tx, jobID, result.N, p.clock.Now()); err != nil {
				return err
			}
			return completeTx(wctx, tx, job)
		})
		if err != nil {
			return "error", err
		}
		return "discarded", nil
	}
	setState := func(state stet.JobState) error {
		return p.inTx(wctx, "extract.failed", func(wctx context.Context, tx *sql.Tx) error {
			if err := ledger.FinishAttempt(wctx, tx, result); err != nil {
				return err
			}
			return ledger.SetJobState(wctx, tx, jobID, token, state, class, p.clock.Now())
		})
	}
	var retryAfter time.Duration
	if pe != nil {
		retryAfter = pe.RetryAfter
	}
	switch class {
	case stet.FailureTransient:
		if a.transientFails+1 >= p.cfg.MaxAttempts || job.Attempt >= job.MaxAttempts {
			return "manual", p.manualAfter(wctx, a)
		}
		if err := setState(stet.JobAccepted); err != nil {
			return "error", err
		}
		return "retry", fmt.Errorf("extract job %s: %w", jobID, errors.Join(pe, errTransient))
	case stet.FailureRateLimited:
		if err := setState(stet.JobWaiting); err != nil {
			return "error", err
		}
		if !a.transcribe && p.hasFallback(a.policyHash, a.profile, processorID) {
			// An approved fallback takes the next attempt now; the limited
			// processor's wait does not hold the job.
			return "rate_limited", river.JobSnooze(0)
		}
		if retryAfter <= 0 {
			retryAfter = p.backoff(1)
		}
		return "rate_limited", river.JobSnooze(retryAfter)
	case stet.FailureQuota, stet.FailureAuth:
		// The processor cannot take work: pause its dispatch (every job for
		// it then waits without spending an attempt) and tell an operator,
		// who unpauses when the key or the budget is fixed.
		if err := setState(stet.JobWaiting); err != nil {
			return "error", err
		}
		if _, err := p.db.PauseForFailure(wctx, ledger.Pause{Scope: "processor:" + processorID, Reason: string(class) + " failure (automatic)",
			PausedBy: "stet", PausedAt: p.clock.Now()}, processorID, class); err != nil {
			return "error", err
		}
		p.alert(p.log.With("job_id", jobID), "processor_paused", "processor", processorID, "failure_class", string(class))
		return "waiting", river.JobSnooze(max(retryAfter, p.cfg.PausedRecheck))
	case stet.FailureBoundary:
		if err := ledger.FinishAttempt(wctx, p.db.Writer(), result); err != nil {
			return "error", err
		}
		reason := "provider_boundary" // the provider refused the call for a boundary reason
		if pe != nil && pe.Code == stet.CodeUndeclaredSubprocessor {
			// A vendor the processor never declared served the call: its
			// output is discarded (never saved), the processor is paused
			// for every job until an operator has looked, and they are told.
			reason = pe.Code
			if _, err := p.db.PauseForFailure(wctx, ledger.Pause{Scope: "processor:" + processorID, Reason: "an undeclared subprocessor served a call (automatic)",
				PausedBy: "stet", PausedAt: p.clock.Now()}, processorID, class); err != nil {
				return "error", err
			}
			p.alert(p.log.With("job_id", jobID), "processor_paused", "processor", processorID, "failure_class", string(class), "reason", reason)
		}
		return "blocked", p.block(wctx, job, token, class, processorID, reason)
	case stet.FailureInvalidOutput, stet.FailureRefusal, stet.FailureUnsupported, stet.FailureStore:
		return "manual", p.manualAfter(wctx, a)
	default:
		return "error", fmt.Errorf("extract job %s: unknown failure class %q", jobID, class)
	}
}

var errTransient = errors.New("transient failure; retrying with backoff")

// manualAfter records attempt a's result and ends extraction with a manual
// record carrying its failure class, in one transaction with the River
// completion.
func (p *Pipeline) manualAfter(ctx context.Context, a attempt) error {
	err := p.inTx(ctx, "extract.manual", func(ctx context.Context, tx *sql.Tx) error {
		if err := ledger.FinishAttempt(ctx, tx, a.result); err != nil {
			return err
		}
		if _, err := p.db.MarkManual(ctx, tx, a.job.Args.JobID, a.token, a.result.FailureClass, p.clock.Now()); err != nil {
			return err
		}
		return completeTx(ctx, tx, a.job)
	})
	if errors.Is(err, stet.ErrLeaseLost) {
		return river.JobSnooze(p.leaseFor())
	}
	if err == nil {
		a.log.Warn("extraction failed for good; manual review record written", "failure_class", string(a.result.FailureClass))
		if a.profile == nil || a.profile.Part == "" {
			p.observeRecord(a.sourceID, a.accepted)
		}
	}
	return err
}

// block moves a job to blocked (no call is made) and completes its River job.
// An operator's resume re-enqueues it.
func (p *Pipeline) block(ctx context.Context, job *river.Job[ExtractArgs], token int64, class stet.FailureClass, processor, reason string) error {
	return p.inTx(ctx, "extract.block", func(ctx context.Context, tx *sql.Tx) error {
		if err := ledger.Block(ctx, tx, job.Args.JobID, token, class, processor, reason, p.clock.Now()); err != nil {
			if errors.Is(err, stet.ErrLeaseLost) {
				return nil
			}
			return err
		}
		return completeTx(ctx, tx, job)
	})
}

// alert raises an alert: a structured log line and a counter, IDs only.
func (p *Pipeline) alert(log *slog.Logger, kind string, args ...any) {
	p.cfg.Metrics.Alerts.WithLabelValues(kind).Inc()
	log.Error("alert", append([]any{"alert", kind}, args...)...)
}

// estimatedOutputTokens is the completion budget admission assumes before a
// call; the reported usage corrects it after.
const estimatedOutputTokens = 512

// admit asks processorID's limiter for one request; a nil ticket comes with
// how long to wait. Processors without limits always admit.
func (p *Pipeline) admit(processorID string, est int) (*admission.Ticket, time.Duration) {
	t, wait := p.limiters[processorID].Admit(est)
	if t == nil {
		// Jitter spreads the jobs that were refused together.
		wait += time.Duration(rand.Int64N(int64(wait)/5 + 1))
	}
	return t, wait
}

// inlineAdmitWait is the longest admission wait a stage spends in process
// rather than snoozing.
func (p *Pipeline) inlineAdmitWait() time.Duration { return min(5*time.Second, p.cfg.JobTimeout/4) }

// admitWithin waits up to limit for an admission; if none comes in time it
// returns a nil ticket and how long is still to wait. The budget counts the
// waits the limiter asked for (its own clock decides when a request fits),
// so no time is read here.
func (p *Pipeline) admitWithin(ctx context.Context, processorID string, est int, limit time.Duration) (*admission.Ticket, time.Duration) {
	var spent time.Duration
	for {
		t, wait := p.admit(processorID, est)
		if t != nil {
			return t, 0
		}
		if spent+wait > limit || ctx.Err() != nil {
			return nil, wait
		}
		select {
		case <-ctx.Done():
			return nil, wait
		case <-time.After(wait):
		}
		spent += wait
	}
}

// admitWait admits a request, sleeping (never in a transaction) while the
// limiter says to wait.
func (p *Pipeline) admitWait(ctx context.Context, processorID string, est int) (*admission.Ticket, error) {
	for {
		t, wait := p.admit(processorID, est)
		if t != nil {
			return t, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

func usedTokens(ext *stet.Extraction, err error) int {
	if ext != nil && ext.InputTokens+ext.OutputTokens > 0 {
		return ext.InputTokens + ext.OutputTokens
	}
	if err != nil {
		var pe *stet.ProcessorError
		if errors.As(err, &pe) && pe.Class == stet.FailureRateLimited {
			return 0 // refused before the model ran
		}
	}
	return -1 // unknown: the estimate stands
}

func (p *Pipeline) recordedPolicy(ctx context.Context, hash string) (*stet.Policy, error) {
	p.mu.Lock()
	pol := p.oldPolicies[hash]
	p.mu.Unlock()
	if pol != nil {
		return pol, nil
	}
	pol, err := ledger.PolicyVersion(ctx, p.db.Writer(), hash)
	if err != nil {
		return nil, fmt.Errorf("recorded policy: %w", err)
	}
	if len(pol.Processors) == 0 {
		return nil, fmt.Errorf("recorded policy %s permits no processor", pol.ID)
	}
	p.mu.Lock()
	p.oldPolicies[hash] = pol
	p.mu.Unlock()
	return pol, nil
}

func (p *Pipeline) minimizer(pol *stet.Policy) (*boundary.Minimizer, error) {
	h := pol.Hash()
	p.mu.Lock()
	defer p.mu.Unlock()
	if m := p.minimizers[h]; m != nil {
		return m, nil
	}
	m, err := boundary.NewMinimizer(pol.Minimize, pol.Names)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", pol.ID, err)
	}
	p.minimizers[h] = m
	return m, nil
}

// stripText keeps template errors from carrying data: only the error type
// survives.
func stripText(err error) error { return fmt.Errorf("template execution error (%T)", err) }

// prepare minimizes a job's text under its recorded policy and renders the
// profile's prompt over it. It returns the request and what leaves the
// host: the rendered prompt for prompted models, the minimized text alone
// for processors that take text only (rules, moderation services).
func (p *Pipeline) prepare(recorded *stet.Policy, profile *Profile, proc stet.Processor, jobID string, text stet.Text) (stet.ExtractParams, stet.Text, error) {
	min, err := p.minimizer(recorded)
	if err != nil {
		return stet.ExtractParams{}, stet.Text{}, err
	}
	input, _ := min.Minimize(text)
	var prompt bytes.Buffer
	// The minimized text goes to processors that take the document itself
	// (Input); only its copy inside the prompt has its data tags quoted.
	data := quoteData(input.Reveal(), profile.dataTags)
	if err := profile.Template.Execute(&prompt, struct{ Text string }{data}); err != nil {
		return stet.ExtractParams{}, stet.Text{}, fmt.Errorf("render prompt for profile %s: %w", profile.ID, stripText(err))
	}
	params := stet.ExtractParams{
		JobID: jobID, Prompt: stet.NewText(prompt.String()), Input: input,
		SchemaName: profile.SchemaName(), Schema: profile.wire,
	}
	sent := params.Prompt
	if info := proc.Info(); !info.SendsTextOffHost || !slices.Contains(info.Capabilities, "json_schema") {
		sent = input
	}
	return params, sent, nil
}
