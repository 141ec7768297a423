package fakekit

import (
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Stats counts what a fake received and answered.
type Stats struct {
	Calls int // requests counted by Traffic.Call
	// Admitted counts requests within the fake's rate limits (every valid,
	// authenticated request when it has none); Limited counts those the
	// limits answered 429. Scripted and random faults are neither.
	Admitted, Limited int
	// Tokens is what the limits charged, counted with or without a token
	// limit.
	Tokens int
	// Status counts answers by HTTP status; 0 counts connections closed
	// without an answer.
	Status map[int]int
	// Windows splits the counts by second of the fake's clock, oldest
	// first; seconds without a request are left out.
	Windows []Window
}

// Window is one second of a fake's traffic.
type Window struct {
	Start                            time.Time
	Calls, Admitted, Limited, Tokens int
}

// Traffic counts a fake's requests in total, by second of the fake's clock
// and by answer status. It is safe for concurrent use.
type Traffic struct {
	now     func() time.Time
	mu      sync.Mutex
	total   Window
	status  map[int]int
	windows map[int64]*Window // by Unix second
}

// NewTraffic returns a Traffic reading time from now (time.Now when nil).
func NewTraffic(now func() time.Time) *Traffic {
	if now == nil {
		now = time.Now
	}
	return &Traffic{now: now, status: map[int]int{}, windows: map[int64]*Window{}}
}

// Call counts one request.
func (t *Traffic) Call() {
	t.count(func(s *Window) { s.Calls++ })
}

// Admit counts one request the limits let through and the tokens charged
// for it.
func (t *Traffic) Admit(tokens int) {
	t.count(func(s *Window) { s.Admitted++; s.Tokens += tokens })
}

// Limit counts one request the limits refused.
func (t *Traffic) Limit() {
	t.count(func(s *Window) { s.Limited++ })
}

// Charge counts tokens charged after admission (a completion whose size
// was not known before the answer).
func (t *Traffic) Charge(tokens int) {
	t.count(func(s *Window) { s.Tokens += tokens })
}

// Status counts one answer by its HTTP status (0: closed without one).
func (t *Traffic) Status(code int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.status[code]++
}

// count applies add to the totals and to the current second's window.
func (t *Traffic) count(add func(*Window)) {
	sec := t.now().Unix()
	t.mu.Lock()
	defer t.mu.Unlock()
	w, ok := t.windows[sec]
	if !ok {
		w = &Window{Start: time.Unix(sec, 0).UTC()}
		t.windows[sec] = w
	}
	add(w)
	add(&t.total)
}

// Stats returns a copy of what has been counted so far.
func (t *Traffic) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := Stats{
		Calls: t.total.Calls, Admitted: t.total.Admitted, Limited: t.total.Limited, Tokens: t.total.Tokens,
		Status: maps.Clone(t.status),
	}
	secs := slices.Sorted(maps.Keys(t.windows))
	s.Windows = make([]Window, 0, len(secs))
	for _, sec := range secs {
		s.Windows = append(s.Windows, *t.windows[sec])
	}
	return s
}

// StatusWriter remembers the status a handler answered, for
// Traffic.Status: 0 until the handler writes, 200 for a body written
// without WriteHeader.
type StatusWriter struct {
	http.ResponseWriter
	Status int
}

// WriteHeader records the first status written.
func (w *StatusWriter) WriteHeader(status int) {
	if w.Status == 0 {
		w.Status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

// Write records 200 if no status was written.
func (w *StatusWriter) Write(b []byte) (int, error) {
	if w.Status == 0 {
		w.Status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (Flush, hijack).
func (w *StatusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
