package processortest

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stetlabs/stet"
)

// Elsewhere is a second server a redirect points to. It records what
// reached it; a processor client must never send it anything.
type Elsewhere struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs int
	seen []byte // every header value and body received, for Carries
}

// NewElsewhere starts an Elsewhere and registers its Close with t.Cleanup.
func NewElsewhere(t *testing.T) *Elsewhere {
	t.Helper()
	e := &Elsewhere{}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
		e.mu.Lock()
		e.reqs++
		for _, vs := range r.Header {
			for _, v := range vs {
				e.seen = append(e.seen, v...)
				e.seen = append(e.seen, '\n')
			}
		}
		e.seen = append(e.seen, r.URL.String()...)
		e.seen = append(e.seen, body...)
		e.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{}`)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

// Requests returns how many requests reached e.
func (e *Elsewhere) Requests() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.reqs
}

// Carries reports whether s appeared in a header, URL or body e received.
func (e *Elsewhere) Carries(s string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return s != "" && bytes.Contains(e.seen, []byte(s))
}

// Redirector starts a server answering every request with status and a
// Location on e (same path and query), as a provider, proxy or captive
// portal might. Its URL is the base URL to give the processor; calls
// counts the requests it received.
func (e *Elsewhere) Redirector(t *testing.T, status int) (url string, calls func() int) {
	t.Helper()
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		n++
		mu.Unlock()
		w.Header().Set("Location", e.srv.URL+r.URL.RequestURI())
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// redirectStatuses are the redirects a processor client must refuse: 302
// (net/http follows it as a GET) and 307 and 308 (it re-sends the body).
var redirectStatuses = []int{http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect}

// CheckRedirectRefused checks one call answered by a redirect: it failed
// transient or unsupported, its error carries neither the canary nor the
// key, and nothing (no request, no key, no text) reached e.
func CheckRedirectRefused(t *testing.T, what string, err error, e *Elsewhere, key string) {
	t.Helper()
	if n := e.Requests(); n != 0 {
		t.Errorf("%s: the redirect's target received %d requests, want 0 (redirects are never followed)", what, n)
	}
	if e.Carries(key) {
		t.Errorf("%s: the API key reached the redirect's target", what)
	}
	if e.Carries(Canary) {
		t.Errorf("%s: the document text reached the redirect's target", what)
	}
	if err == nil {
		t.Fatalf("%s = nil error, want a transient or unsupported *stet.ProcessorError", what)
	}
	pe := AsProcessorError(t, what, err)
	if pe.Class != stet.FailureTransient && pe.Class != stet.FailureUnsupported {
		t.Errorf("%s: class = %q, want transient or unsupported (cause %v)", what, pe.Class, pe.Err)
	}
	noCanary(t, what, err)
	if key != "" && strings.Contains(err.Error(), key) {
		t.Errorf("%s: error text carries the API key", what)
	}
}

// exerciseRedirects runs Exercise's redirect cases: for each redirect
// status, with the adapter's own client and with a caller's plain
// http.Client (which would follow), one Extract answered by a redirect.
func exerciseRedirects(t *testing.T, h Harness) {
	for _, status := range redirectStatuses {
		for _, own := range []bool{true, false} {
			name := http.StatusText(status)
			if !own {
				name += " through the caller's client"
			}
			t.Run("redirect "+name+" is refused", func(t *testing.T) {
				t.Parallel()
				e := NewElsewhere(t)
				base, calls := e.Redirector(t, status)
				var hc *http.Client
				if !own {
					hc = &http.Client{}
				}
				_, err := h.open(t, base, 0, hc).Extract(t.Context(), h.params("Classify: "+Canary))
				CheckRedirectRefused(t, "Extract() answered "+name, err, e, h.Common.APIKey)
				if n := calls(); n != 1 {
					t.Errorf("calls to the redirecting server = %d, want 1", n)
				}
			})
		}
	}
}

// exerciseBatchRedirects runs ExerciseBatch's redirect cases: a submission
// and a status lookup answered by a redirect.
func exerciseBatchRedirects(t *testing.T, h BatchHarness) {
	for _, status := range redirectStatuses {
		name := http.StatusText(status)
		t.Run("submit redirected "+name+" is refused", func(t *testing.T) {
			t.Parallel()
			e := NewElsewhere(t)
			base, calls := e.Redirector(t, status)
			_, err := h.open(t, base).SubmitBatch(t.Context(), stet.BatchSubmit{
				BatchID: "bat_conformance_redirect",
				Items:   h.items("job_a", "job_b"),
			})
			CheckRedirectRefused(t, "SubmitBatch() answered "+name, err, e, h.Common.APIKey)
			if n := calls(); n == 0 {
				t.Errorf("calls to the redirecting server = 0, want at least 1")
			}
		})
		t.Run("status lookup redirected "+name+" is refused", func(t *testing.T) {
			t.Parallel()
			// A batch the provider knows, so that the adapter has a valid
			// ID to look up.
			f := h.Start(t)
			hd, err := h.open(t, f.URL).SubmitBatch(t.Context(), stet.BatchSubmit{BatchID: "bat_conformance_redirect", Items: h.items("job_a")})
			if err != nil {
				t.Fatalf("SubmitBatch() = %v", err)
			}
			e := NewElsewhere(t)
			base, calls := e.Redirector(t, status)
			_, err = h.open(t, base).BatchStatus(t.Context(), hd.ProviderID)
			CheckRedirectRefused(t, "BatchStatus() answered "+name, err, e, h.Common.APIKey)
			if n := calls(); n != 1 {
				t.Errorf("calls to the redirecting server = %d, want 1", n)
			}
		})
	}
}
