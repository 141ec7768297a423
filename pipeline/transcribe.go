package pipeline

// The transcribe step (docs/design.md §19). A job whose revision came as
// audio and has no transcript yet runs it first, in the extract stage: the
// gate picks a transcriber its recorded policy and the policy in force
// permit (audio: allow, listed, region, subprocessors, nothing pending),
// admission and pauses apply as to a processor, the claim records the
// attempt with the SHA-256 of the audio before the call, and the
// transcript is saved fenced on the attempt token, in one transaction that
// also makes it the revision's text and gives the job back for its
// extraction. A failure takes the same paths as a processor's: transient
// and rate-limited retry, unsupported (an empty transcript among them) is
// manual. A crash after the save never transcribes again: the revision no
// longer awaits a transcript.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/boundary"
	"github.com/stetlabs/stet/internal/crash"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/processor/transcribe"
)

// transcriberFor picks the transcriber of a job awaiting its transcript:
// the first of the recorded policy's transcribers that both policies
// permit (a nil current policy permits none), or after a transient or
// rate-limited failure of one the next permitted after it. When none may
// hear the audio it returns "" and the first refused transcriber with the
// gate's code, for the job's blocked reason.
func (p *Pipeline) transcriberFor(recorded, current *stet.Policy, last string, lastClass stet.FailureClass) (id, refused, code string) {
	var permitted []string
	code = boundary.CodeAudioNotPermitted // no transcriber listed at all
	refuse := func(id, c string) {
		if refused == "" {
			refused, code = id, c
		}
	}
	for _, id := range recorded.Transcribers {
		t := p.cfg.Transcribers[id]
		if t == nil {
			refuse(id, reasonNotConfigured)
			continue
		}
		info := t.Info()
		err := boundary.CheckTranscriber(recorded, info)
		if err == nil {
			err = boundary.CheckTranscriber(current, info)
		}
		if err != nil {
			c := boundary.CodeProcessorNotPermitted
			var pe *stet.ProcessorError
			if errors.As(err, &pe) && pe.Code != "" {
				c = pe.Code
			}
			refuse(id, c)
			continue
		}
		permitted = append(permitted, id)
	}
	if len(permitted) == 0 {
		return "", refused, code
	}
	if lastClass == stet.FailureTransient || lastClass == stet.FailureRateLimited {
		for i, id := range permitted {
			if id == last {
				return permitted[(i+1)%len(permitted)], "", ""
			}
		}
	}
	return permitted[0], "", ""
}

// transcribeStep runs the transcribe step of a job whose revision awaits
// its transcript, then (when it saved one) the job's extraction.
func (p *Pipeline) transcribeStep(ctx context.Context, job *river.Job[ExtractArgs], work *ledger.WorkItem, log *slog.Logger) (string, error) {
	j := &work.Job
	jobID := j.ID
	log = log.With("stage", "transcribe")
	recorded, err := p.recordedPolicy(ctx, j.PolicyHash)
	if err != nil {
		return "error", err
	}
	current := p.policies[recorded.ID]
	id, refused, code := p.transcriberFor(recorded, current, work.LastProcessor, work.LastClass)
	if id == "" {
		p.alert(log, "job_blocked", "processor", refused, "failure_class", string(stet.FailureBoundary), "reason", code)
		return "blocked", p.block(ctx, job, j.Attempt, stet.FailureBoundary, refused, code)
	}
	tr := p.cfg.Transcribers[id]
	now := p.clock.Now()
	if work.Paused(id) {
		if err := p.markWaiting(ctx, j, now); err != nil {
			return "error", err
		}
		return "paused", river.JobSnooze(p.cfg.PausedRecheck)
	}
	ticket, wait := p.admitWithin(ctx, id, 0, p.inlineAdmitWait())
	if ticket == nil {
		if err := p.markWaiting(ctx, j, now); err != nil {
			return "error", err
		}
		return "throttled", river.JobSnooze(wait)
	}
	// The clip (up to audio_body_limit) is read once admitted: a job that
	// waits reads none.
	audio, err := p.db.LoadAudio(ctx, p.db.Reader(), jobID)
	if err != nil {
		ticket.Done(0, false, 0) // nothing was sent
	}
	if errors.Is(err, ledger.ErrAudioGone) {
		// A deletion took it; the deletion cancels the job.
		return "noop", nil
	}
	if err != nil {
		return "error", err
	}
	clip := transcribe.Audio{ContentType: audio.ContentType, Data: audio.Data}
	var token int64
	var n int
	claim := ledger.ClaimParams{JobID: jobID, Expected: j.Attempt, Now: now, LeaseFor: p.leaseFor(), Holder: p.holder(),
		ProcessorID: id, InputSHA256: clip.SHA256()}
	err = p.inStatement(ctx, "transcribe.claim", func(ctx context.Context, q ledger.Querier) (err error) {
		token, n, err = p.db.Claim(ctx, q, claim)
		return err
	})
	if err != nil {
		ticket.Done(0, false, 0)
	}
	if errors.Is(err, ledger.ErrNotClaimable) {
		return "held", river.JobSnooze(250 * time.Millisecond)
	}
	if err != nil {
		return "error", fmt.Errorf("claim job %s: %w", jobID, err)
	}
	log = log.With("attempt", token, "transcriber", id)

	callCtx, cancel := context.WithTimeout(ctx, p.cfg.JobTimeout)
	t, callErr := tr.Transcribe(callCtx, clip)
	cancel()
	ticket.Done(0, stet.ClassOf(callErr) == stet.FailureRateLimited, stet.RetryAfterOf(callErr))
	label := "ok"
	if callErr != nil {
		label = string(stet.ClassOf(callErr))
	}
	p.cfg.Metrics.ProviderCalls.WithLabelValues(id, label).Inc()
	var ext *stet.Extraction
	if t != nil {
		ext = &stet.Extraction{Model: t.Model, RequestID: t.RequestID, StatusCode: t.StatusCode, Latency: t.Latency}
	}
	result := attemptResult(jobID, n, ext, callErr, p.clock.Now())
	if callErr != nil {
		if ctx.Err() != nil && p.stopping.Load() {
			return p.releaseForShutdown(ctx, job, token, n, log)
		}
		var pe *stet.ProcessorError
		errors.As(callErr, &pe)
		log.Warn("transcriber call failed", "failure_class", string(result.FailureClass), "status_code", result.StatusCode, "request_id", result.RequestID)
		return p.failed(ctx, attempt{job: job, reportID: j.ReportID, sourceID: j.SourceID, token: token, processor: id,
			policyHash: j.PolicyHash, transientFails: work.TransientFails, result: result, log: log, accepted: j.CreatedAt,
			transcribe: true}, pe)
	}
	err = p.inTx(ctx, "transcribe.save", func(ctx context.Context, tx *sql.Tx) error {
		return p.db.SaveTranscript(ctx, tx, ledger.Transcript{JobID: jobID, Token: token, Attempt: result, Text: t.Text,
			Transcriber: id, Model: t.Model, KeepAudio: current.AudioRetention, Now: p.clock.Now()})
	})
	switch {
	case errors.Is(err, stet.ErrLeaseLost):
		return "superseded", nil
	case err != nil:
		// The transcript is in memory only: the job's lease runs out and
		// the step runs again.
		return "error", fmt.Errorf("save transcript of job %s: %w", jobID, err)
	}
	log.Info("transcript saved", "audio_seconds", t.AudioSeconds, "duration_ms", t.Latency.Milliseconds())
	crash.Point(crash.AfterTranscript)
	// The revision has its text now: extract it in the same run.
	return p.extract(ctx, job)
}
