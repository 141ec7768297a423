package fakekit

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"
)

// Server is a fake's local HTTP server and the signal that it is closing.
// Handlers wait through Sleep and Hold so that Close never hangs on a
// request a fault holds open.
type Server struct {
	srv  *httptest.Server
	done chan struct{}
	stop sync.Once
}

// NewServer starts h on a local httptest server.
func NewServer(h http.Handler) *Server {
	return &Server{srv: httptest.NewServer(h), done: make(chan struct{})}
}

// URL is the server's base URL ("http://127.0.0.1:PORT"), without a path.
func (s *Server) URL() string { return s.srv.URL }

// Done is closed when Close starts.
func (s *Server) Done() <-chan struct{} { return s.done }

// Close releases requests held in Sleep and Hold, then stops the server.
// It is safe to call more than once.
func (s *Server) Close() {
	s.stop.Do(func() {
		close(s.done)
		s.srv.Close()
	})
}

// Sleep waits d unless the client leaves or the server closes first; it
// reports whether the whole wait passed. d <= 0 returns true at once.
func (s *Server) Sleep(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	case <-s.done:
		return false
	}
}

// Hold waits until the client leaves or the server closes: a response cut
// off after its headers, for timeout faults.
func (s *Server) Hold(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-s.done:
	}
}

// Reply sends status and body with a Content-Length, after merging each of
// headers over those already set on w (later ones win, as MergeHeader).
func Reply(w http.ResponseWriter, status int, body []byte, headers ...http.Header) {
	h := w.Header()
	for _, x := range headers {
		MergeHeader(h, x)
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// HalfAnswer sends status with the headers set on w (each of headers merged
// over them, as Reply does) and a Content-Length for all of body, writes
// only body's first half, flushes, and holds the connection until the
// client leaves or the server closes: an answer cut off in transit, for
// timeout-after-answer faults.
func (s *Server) HalfAnswer(w http.ResponseWriter, r *http.Request, status int, body []byte, headers ...http.Header) {
	for _, x := range headers {
		MergeHeader(w.Header(), x)
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body[:len(body)/2])
	_ = http.NewResponseController(w).Flush()
	s.Hold(r)
}
