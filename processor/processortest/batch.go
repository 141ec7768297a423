package processortest

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
)

// BatchFake is one running provider fake with a batch API, as
// ExerciseBatch drives it.
type BatchFake struct {
	Fake
	// Batches returns how many batches the fake has created.
	Batches func() int
	// ScriptItem scripts the answer of the batch item for jobID (Truncated,
	// Refusal with Script.Message, ServerError); items not scripted are
	// answered normally.
	ScriptItem func(jobID string, s Script)
	// ItemsContaining returns how many batch items the fake received whose
	// text contains s (the canary must reach the provider).
	ItemsContaining func(s string) int
	// StatusFault scripts the answer of the next batch status lookup
	// (RateLimit with Script.RetryAfter, ServerError with Script.Message).
	StatusFault func(s Script)
}

// BatchHarness adapts one provider to ExerciseBatch.
type BatchHarness struct {
	// Start starts a fresh fake whose batches end, completed, within Polls
	// status lookups, and registers its Close with t.Cleanup.
	Start func(t *testing.T) BatchFake
	// Open builds the batch processor under test from c (Common with the
	// fake's base URL), as Harness.Open does.
	Open func(c processor.Common) (stet.BatchProcessor, error)
	// Common is a valid configuration the cases start from.
	Common processor.Common
	// Params, when set, builds an item's params (default as Harness).
	Params func(prompt string) stet.ExtractParams
	// Polls bounds the status lookups until a batch ends (default 10).
	Polls int
	// Lacks names Fault kinds the provider's batch items cannot carry, with
	// the reason.
	Lacks map[Fault]string
	// Info is what the processor's BatchInfo must report.
	Info stet.BatchInfo
}

func (h BatchHarness) open(t *testing.T, baseURL string) stet.BatchProcessor {
	t.Helper()
	c := h.Common
	c.BaseURL = baseURL
	p, err := h.Open(c)
	if err != nil {
		t.Fatalf("Open(%s) = %v", c.ID, err)
	}
	return p
}

func (h BatchHarness) items(ids ...string) []stet.BatchItem {
	ph := Harness{Params: h.Params}
	items := make([]stet.BatchItem, 0, len(ids))
	for _, id := range ids {
		p := ph.params("Classify report " + id + ": " + Canary)
		p.JobID = id
		items = append(items, stet.BatchItem{JobID: id, Params: p})
	}
	return items
}

// ExerciseBatch runs the conformance cases of stet.BatchProcessor against h.
func ExerciseBatch(t *testing.T, h BatchHarness) {
	t.Helper()
	polls := h.Polls
	if polls <= 0 {
		polls = 10
	}

	exerciseBatchRedirects(t, h)

	t.Run("batch info", func(t *testing.T) {
		t.Parallel()
		if got := h.open(t, h.Start(t).URL).BatchInfo(); got != h.Info {
			t.Errorf("BatchInfo() = %+v, want %+v", got, h.Info)
		}
	})

	t.Run("submit calls BeforeCreate once, right before creating", func(t *testing.T) {
		t.Parallel()
		f := h.Start(t)
		p := h.open(t, f.URL)
		calls := 0
		hd, err := p.SubmitBatch(t.Context(), stet.BatchSubmit{
			BatchID: "bat_conformance_a",
			Items:   h.items("job_a", "job_b", "job_c"),
			BeforeCreate: func(context.Context, string) error {
				calls++
				if n := f.Batches(); n != 0 {
					t.Errorf("BeforeCreate saw %d batches created, want 0", n)
				}
				return nil
			},
		})
		if err != nil {
			t.Fatalf("SubmitBatch() = %v", err)
		}
		if calls != 1 {
			t.Errorf("BeforeCreate called %d times, want 1", calls)
		}
		if n := f.Batches(); n != 1 {
			t.Errorf("batches created = %d, want 1", n)
		}
		if hd.ProviderID == "" || hd.RequestCount != 3 || (hd.State != stet.BatchSubmitted && hd.State != stet.BatchInProgress) {
			t.Errorf("SubmitBatch() = %+v, want a provider ID, 3 requests, submitted or in_progress", hd)
		}
		if n := f.ItemsContaining(Canary); n != 3 {
			t.Errorf("items carrying the prompt = %d, want 3", n)
		}
	})

	t.Run("submit aborts when BeforeCreate fails", func(t *testing.T) {
		t.Parallel()
		f := h.Start(t)
		p := h.open(t, f.URL)
		errRefused := errors.New("ledger refused")
		_, err := p.SubmitBatch(t.Context(), stet.BatchSubmit{
			BatchID:      "bat_conformance_abort",
			Items:        h.items("job_a"),
			BeforeCreate: func(context.Context, string) error { return errRefused },
		})
		if err == nil {
			t.Fatal("SubmitBatch() with a failing BeforeCreate = nil, want an error")
		}
		if n := f.Batches(); n != 0 {
			t.Errorf("batches created = %d, want 0", n)
		}
	})

	t.Run("status lookup rate-limited or failing", func(t *testing.T) {
		t.Parallel()
		f := h.Start(t)
		p := h.open(t, f.URL)
		hd, err := p.SubmitBatch(t.Context(), stet.BatchSubmit{BatchID: "bat_conformance_status", Items: h.items("job_a")})
		if err != nil {
			t.Fatalf("SubmitBatch() = %v", err)
		}
		for _, tc := range []struct {
			script Script
			want   want
		}{
			{Script{Fault: RateLimit, RetryAfter: "7", Message: Canary}, want{class: stet.FailureRateLimited, status: 429, retryAfter: 7 * time.Second}},
			{Script{Fault: ServerError, Message: Canary}, want{class: stet.FailureTransient, status: 500}},
		} {
			f.StatusFault(tc.script)
			st, err := p.BatchStatus(t.Context(), hd.ProviderID)
			checkErr(t, "BatchStatus() with "+string(tc.script.Fault), tc.want, err, hd.ProviderID)
			if st != nil {
				t.Errorf("BatchStatus() with %s = %+v, want none", tc.script.Fault, st)
			}
		}
		if st, err := p.BatchStatus(t.Context(), hd.ProviderID); err != nil || st.ProviderID != hd.ProviderID {
			t.Errorf("BatchStatus() after the faults = %+v, %v; want the batch", st, err)
		}
	})

	t.Run("find, status and results map items to jobs", func(t *testing.T) {
		t.Parallel()
		f := h.Start(t)
		p := h.open(t, f.URL)
		ids := []string{"job_ok", "job_truncated", "job_refusal", "job_server", "job_ok2"}
		scripted := map[string]stet.FailureClass{"job_truncated": stet.FailureInvalidOutput, "job_refusal": stet.FailureRefusal, "job_server": stet.FailureTransient}
		for id, s := range map[string]Script{
			"job_truncated": {Fault: Truncated},
			"job_refusal":   {Fault: Refusal, Message: "I will not discuss " + Canary},
			"job_server":    {Fault: ServerError, Message: Canary},
		} {
			if why, ok := h.Lacks[s.Fault]; ok {
				t.Logf("provider lacks %s in batch items (%s): %s answered normally", s.Fault, why, id)
				delete(scripted, id)
				continue
			}
			f.ScriptItem(id, s)
		}
		start := time.Now()
		hd, err := p.SubmitBatch(t.Context(), stet.BatchSubmit{BatchID: "bat_conformance_map", Items: h.items(ids...)})
		if err != nil {
			t.Fatalf("SubmitBatch() = %v", err)
		}

		if !p.BatchInfo().IdempotentSubmit {
			found, err := p.FindBatch(t.Context(), stet.BatchQuery{BatchID: "bat_conformance_map", SubmittedAt: start, ItemCount: len(ids), InputFileID: hd.InputFileID})
			if err != nil || !slices.ContainsFunc(found, func(b stet.BatchHandle) bool { return b.ProviderID == hd.ProviderID }) {
				t.Errorf("FindBatch() = %+v, %v; want the submitted batch %q", found, err, hd.ProviderID)
			}
			none, err := p.FindBatch(t.Context(), stet.BatchQuery{BatchID: "bat_conformance_never", SubmittedAt: time.Now(), ItemCount: 1})
			if err != nil || len(none) != 0 {
				t.Errorf("FindBatch() of a batch never submitted = %+v, %v; want none", none, err)
			}
		}
		created := f.Batches()

		var st *stet.BatchStatus
		for range polls {
			st, err = p.BatchStatus(t.Context(), hd.ProviderID)
			if err != nil {
				t.Fatalf("BatchStatus() = %v", err)
			}
			if st.ProviderID != hd.ProviderID {
				t.Fatalf("BatchStatus().ProviderID = %q, want %q", st.ProviderID, hd.ProviderID)
			}
			if st.State.Terminal() {
				break
			}
		}
		if st.State != stet.BatchCompleted {
			t.Fatalf("BatchStatus() after %d polls = %q, want completed", polls, st.State)
		}

		first, err := p.BatchResults(t.Context(), st)
		if err != nil {
			t.Fatalf("BatchResults() = %v", err)
		}
		second, err := p.BatchResults(t.Context(), st)
		if err != nil {
			t.Fatalf("BatchResults() again = %v", err)
		}
		if got, again := summarize(first), summarize(second); !slices.Equal(got, again) {
			t.Errorf("BatchResults() differs between fetches:\n%v\n%v", got, again)
		}
		var got []string
		for _, r := range first {
			got = append(got, r.JobID)
			want, isScripted := scripted[r.JobID]
			switch {
			case !slices.Contains(ids, r.JobID):
				t.Errorf("result for %q, which was never submitted", r.JobID)
			case isScripted:
				if r.Extraction != nil || stet.ClassOf(r.Err) != want {
					t.Errorf("%s: result %v, %v; want %s", r.JobID, r.Extraction, r.Err, want)
				}
				noCanary(t, r.JobID, r.Err, hd.ProviderID, st.OutputFileID, st.ErrorFileID)
			case r.Err != nil || r.Extraction == nil || !json.Valid(r.Extraction.Output):
				t.Errorf("%s: result %v, %v; want an extraction with JSON output", r.JobID, r.Extraction, r.Err)
			}
		}
		slices.Sort(got)
		wantIDs := slices.Sorted(slices.Values(ids))
		if !slices.Equal(got, wantIDs) {
			t.Errorf("BatchResults() jobs = %v, want one result per item %v", got, wantIDs)
		}
		if n := f.Batches(); n != created {
			t.Errorf("status and results created %d batches, want none", n-created)
		}
		_, err = p.BatchStatus(t.Context(), "batch_"+Canary)
		if stet.ClassOf(err) == stet.FailureNone {
			t.Errorf("BatchStatus(unknown) = nil error, want a failure")
		}
		var pe *stet.ProcessorError
		if err != nil && !errors.As(err, &pe) {
			t.Errorf("BatchStatus(unknown) = %v, want a *stet.ProcessorError", err)
		}
		noCanary(t, "BatchStatus(unknown)", err)
	})
}

func summarize(rs []stet.BatchResult) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		s := r.JobID + " " + string(stet.ClassOf(r.Err))
		if r.Extraction != nil {
			s += " " + string(r.Extraction.Output)
		}
		out = append(out, s)
	}
	return out
}
