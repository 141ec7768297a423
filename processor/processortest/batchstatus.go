package processortest

import (
	"cmp"
	"path"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet"
)

// BatchStatusCase is one row of an adapter's BatchStatus table: an answer
// scripted on the provider's status route and what BatchStatus must come
// to.
type BatchStatusCase[F, W any] struct {
	Name string
	// Fault is scripted on the status route, once for each call the
	// lookup may make; nil: the fake answers as itself.
	Fault *F
	// With is the adapter's own variation of the row (its HTTP client, a
	// wrong key), given to BatchStatusHarness.Open.
	With W
	// ID is looked up instead of the batch the harness submitted.
	ID string
	// Class, Status, Code and RetryAfter are the outcome: success
	// (FailureNone) with the answer's Status, or a *stet.ProcessorError
	// with exactly these fields.
	Class      stet.FailureClass
	Status     int
	Code       string
	RetryAfter time.Duration
	// MaxCalls is how many status calls the lookup may make (default 1):
	// net/http resends a GET once when a reused connection dies before
	// answering.
	MaxCalls int
}

// BatchLookup is one fresh fake with one batch submitted, as
// BatchStatusHarness drives it.
type BatchLookup[F any] struct {
	// Processor is the batch processor under test.
	Processor stet.BatchProcessor
	// ProviderID is the submitted batch's.
	ProviderID string
	// Script scripts the next answer of the status route.
	Script func(F)
	// StatusCalls, when set, returns how many status lookups the fake has
	// received: a row's lookup must make one (at most MaxCalls).
	StatusCalls func() int
	// Check, when set, checks what else the provider adds to the outcome:
	// st after a success, pe after a failure.
	Check func(t *testing.T, st *stet.BatchStatus, pe *stet.ProcessorError)
}

// BatchStatusHarness runs a table of BatchStatusCase rows.
type BatchStatusHarness[F, W any] struct {
	// Open starts a fresh fake, submits one batch and returns the lookup
	// the row's With configures, its clock at the instant the rows' dates
	// are computed against.
	Open func(t *testing.T, with W) BatchLookup[F]
	// RequestID, when set, is what a failure's RequestID must match when
	// the row's answer has a Status that is not a redirect: the provider's
	// request ID.
	RequestID *regexp.Regexp
}

// Run runs each row in a parallel subtest: the fault is scripted, one
// BatchStatus made, and the outcome must be the row's, with no status
// beside an error, the fake asked once, and an error's text naming neither
// the batch looked up nor the one submitted.
func (h BatchStatusHarness[F, W]) Run(t *testing.T, cases []BatchStatusCase[F, W]) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			l := h.Open(t, c.With)
			for range max(c.MaxCalls, 1) {
				if c.Fault != nil {
					l.Script(*c.Fault)
				}
			}
			id := cmp.Or(c.ID, l.ProviderID)
			st, err := l.Processor.BatchStatus(t.Context(), id)
			what := "BatchStatus() with " + c.Name
			if l.StatusCalls != nil {
				if n := l.StatusCalls(); n < 1 || n > max(c.MaxCalls, 1) {
					t.Errorf("%s: status calls = %d, want 1 (one lookup, no retries of its own)", what, n)
				}
			}
			var pe *stet.ProcessorError
			if c.Class == stet.FailureNone {
				if err != nil {
					t.Fatalf("%s = %v, want success", what, err)
				}
				if st == nil || st.StatusCode != c.Status {
					t.Fatalf("%s = %+v, want a status answered with %d", what, st, c.Status)
				}
			} else {
				pe = AsProcessorError(t, what, err)
				if st != nil {
					t.Errorf("%s = %+v beside an error, want nil", what, st)
				}
				got := Outcome{pe.Class, pe.StatusCode, pe.Code, pe.RetryAfter}
				if want := (Outcome{c.Class, c.Status, c.Code, c.RetryAfter}); got != want {
					t.Errorf("%s = %+v, want %+v (cause %v)", what, got, want, pe.Err)
				}
				for _, s := range []string{id, path.Base(l.ProviderID)} {
					if strings.Contains(err.Error(), s) {
						t.Errorf("%s: error %q names the batch", what, err)
					}
				}
				redirect := c.Status >= 300 && c.Status < 400
				if h.RequestID != nil && c.Status != 0 && !redirect && !h.RequestID.MatchString(pe.RequestID) {
					t.Errorf("%s: RequestID = %q, want the provider's (%s)", what, pe.RequestID, h.RequestID)
				}
			}
			if l.Check != nil {
				l.Check(t, st, pe)
			}
		})
	}
}
