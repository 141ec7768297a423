package fakekit

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestFaultsScriptedThenRandom(t *testing.T) {
	t.Parallel()
	q := NewFaults(1, 0x5e7, 0, "never")
	q.Enqueue("a", "b")
	q.Enqueue("c")
	var got []string
	for range 4 {
		if ft, ok := q.Next(); ok {
			got = append(got, ft)
		}
	}
	if want := []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Errorf("Next() x4 = %v, want %v then nothing (rate 0)", got, want)
	}
	if n := q.Pending(); n != 0 {
		t.Errorf("Pending() = %d, want 0", n)
	}
}

func TestFaultsRandomAreReproducible(t *testing.T) {
	t.Parallel()
	draw := func(seed int64, stream uint64) []string {
		q := NewFaults(seed, stream, 0.5, "x", "y", "z")
		var out []string
		for range 60 {
			ft, ok := q.Next()
			if !ok {
				ft = "-"
			}
			out = append(out, ft)
		}
		return out
	}
	a := draw(42, 1)
	if !slices.Equal(a, draw(42, 1)) {
		t.Errorf("draws with the same seed and stream differ")
	}
	if slices.Equal(a, draw(42, 2)) || slices.Equal(a, draw(7, 1)) {
		t.Errorf("another seed or stream gave the same draws %v", a)
	}
	for _, k := range []string{"-", "x", "y", "z"} {
		if !slices.Contains(a, k) {
			t.Errorf("60 draws at rate 0.5 never gave %q: %v", k, a)
		}
	}
}

func TestCalls(t *testing.T) {
	t.Parallel()
	var c Calls
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			c.Add()
			if i%2 == 0 {
				c.Record("report with marker-x")
			}
		})
	}
	wg.Wait()
	c.Record("other")
	if n := c.Count(); n != 10 {
		t.Errorf("Count() = %d, want 10", n)
	}
	if n := c.Containing("marker-x"); n != 5 {
		t.Errorf("Containing(marker-x) = %d, want 5", n)
	}
	if n := c.Containing("absent"); n != 0 {
		t.Errorf("Containing(absent) = %d, want 0", n)
	}
}

func TestLatency(t *testing.T) {
	t.Parallel()
	if d := NewLatency(1, 1, 5*time.Millisecond, time.Millisecond).Draw(); d != 5*time.Millisecond {
		t.Errorf("Draw() with max below min = %v, want min", d)
	}
	a, b := NewLatency(3, 9, 10*time.Millisecond, 20*time.Millisecond), NewLatency(3, 9, 10*time.Millisecond, 20*time.Millisecond)
	seen := map[time.Duration]bool{}
	for range 50 {
		d := a.Draw()
		if d < 10*time.Millisecond || d > 20*time.Millisecond {
			t.Fatalf("Draw() = %v, want within [10ms, 20ms]", d)
		}
		if e := b.Draw(); e != d {
			t.Fatalf("draws with the same seed differ: %v, %v", d, e)
		}
		seen[d] = true
	}
	if len(seen) < 10 {
		t.Errorf("50 draws gave only %d distinct values", len(seen))
	}
}

func TestTraffic(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	tr := NewTraffic(func() time.Time { return now })
	tr.Call()
	tr.Admit(10)
	tr.Status(200)
	now = now.Add(1500 * time.Millisecond)
	tr.Call()
	tr.Limit()
	tr.Status(429)
	tr.Charge(3)
	s := tr.Stats()
	if s.Calls != 2 || s.Admitted != 1 || s.Limited != 1 || s.Tokens != 13 {
		t.Errorf("Stats() totals = %+v, want 2 calls, 1 admitted, 1 limited, 13 tokens", s)
	}
	if s.Status[200] != 1 || s.Status[429] != 1 {
		t.Errorf("Stats().Status = %v, want one 200 and one 429", s.Status)
	}
	want := []Window{
		{Start: now.Add(-1500 * time.Millisecond), Calls: 1, Admitted: 1, Tokens: 10},
		{Start: now.Truncate(time.Second), Calls: 1, Limited: 1, Tokens: 3},
	}
	if !slices.Equal(s.Windows, want) {
		t.Errorf("Stats().Windows = %+v, want %+v", s.Windows, want)
	}
	s.Status[200] = 99
	if tr.Stats().Status[200] != 1 {
		t.Errorf("Stats() shares its Status map with the Traffic")
	}
}

func TestBucket(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	b := NewBucket(600, time.Second, t0) // 10 a second, holds 10
	if b.Capacity() != 10 || b.Remaining() != 10 {
		t.Fatalf("new bucket: capacity %v, remaining %d; want 10 and 10", b.Capacity(), b.Remaining())
	}
	b.Take(12)
	if b.Remaining() != 0 || b.Level() != -2 {
		t.Errorf("after taking 12: remaining %d, level %v; want 0 and -2 (debt)", b.Remaining(), b.Level())
	}
	if d := b.Until(1 - b.Level()); d != 300*time.Millisecond {
		t.Errorf("Until(3) = %v, want 300ms", d)
	}
	b.Refill(t0.Add(500 * time.Millisecond))
	if b.Level() != 3 {
		t.Errorf("level after 500ms = %v, want 3", b.Level())
	}
	b.Refill(t0.Add(time.Hour))
	if b.Level() != 10 || b.UntilFull() != 0 {
		t.Errorf("level after an hour = %v (until full %v), want 10 and 0", b.Level(), b.UntilFull())
	}
	if c := NewBucket(1, time.Second, t0).Capacity(); c != 1 {
		t.Errorf("capacity of 1/min over a second = %v, want at least 1", c)
	}
}

func TestServerSleepAndHoldEndOnClose(t *testing.T) {
	t.Parallel()
	var s *Server
	held := make(chan bool, 2)
	reached := make(chan struct{})
	s = NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(reached)
		held <- s.Sleep(r, time.Hour)
		s.Hold(r)
		held <- true
	}))
	go func() { _, _ = http.Get(s.URL()) }()
	<-reached
	s.Close()
	if slept := <-held; slept {
		t.Errorf("Sleep(1h) = true after Close, want false")
	}
	<-held
	s.Close() // twice is harmless
}

func TestStatusWriter(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	w := &StatusWriter{ResponseWriter: rec}
	_, _ = w.Write([]byte("x"))
	w.WriteHeader(500)
	if w.Status != 200 {
		t.Errorf("Status after Write then WriteHeader(500) = %d, want 200", w.Status)
	}
	w2 := &StatusWriter{ResponseWriter: httptest.NewRecorder()}
	w2.WriteHeader(429)
	if w2.Status != 429 || w2.Unwrap() == nil {
		t.Errorf("Status = %d, want 429 and an unwrappable writer", w2.Status)
	}
}

func TestWireHelpers(t *testing.T) {
	t.Parallel()
	if got := string(Marshal(map[string]string{"a": "<b>&"})); got != `{"a":"<b>&"}` {
		t.Errorf("Marshal() = %s, want no HTML escaping and no newline", got)
	}
	if got := string(MarshalIndent([]int{1}, "  ")); got != "[\n  1\n]" {
		t.Errorf("MarshalIndent() = %q", got)
	}
	for _, in := range []string{`{"category":"ok","flags":[]}`, `{}`, `[1,2]`, `{"a":1}`} {
		if out := Cut(in); json.Valid([]byte(out)) {
			t.Errorf("Cut(%s) = %s, valid JSON", in, out)
		}
	}
	h := http.Header{"A": {"1"}, "B": {"2"}}
	MergeHeader(h, http.Header{"A": {"3", "4"}, "B": nil, "C": {"5"}})
	if !slices.Equal(h["A"], []string{"3", "4"}) || h.Get("B") != "" || h.Get("C") != "5" {
		t.Errorf("MergeHeader() = %v, want A replaced, B deleted, C added", h)
	}
	if id := RandomHex(16); !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(id) || id == RandomHex(16) {
		t.Errorf("RandomHex(16) = %q", id)
	}
	if id := RandomString("ab", 20); !regexp.MustCompile(`^[ab]{20}$`).MatchString(id) {
		t.Errorf("RandomString() = %q", id)
	}
	if id := UUIDv4(); !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(id) {
		t.Errorf("UUIDv4() = %q", id)
	}
	at := time.UnixMilli(0x0123456789ab)
	if id := UUIDv7(at); !regexp.MustCompile(`^01234567-89ab-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(id) {
		t.Errorf("UUIDv7() = %q, want the time in the first 48 bits", id)
	}
}

func TestHalfAnswer(t *testing.T) {
	t.Parallel()
	var s *Server
	s = NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Default", "1")
		w.Header().Set("X-Gone", "1")
		s.HalfAnswer(w, r, http.StatusOK, []byte(`{"abcdef":1}`), http.Header{"X-Extra": {"2"}, "X-Gone": nil})
	}))
	defer s.Close()
	resp, err := http.Get(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	h := resp.Header
	if h.Get("X-Default") != "1" || h.Get("X-Extra") != "2" || h.Values("X-Gone") != nil || resp.ContentLength != 12 {
		t.Errorf("headers %v, Content-Length %d; want the defaults, X-Extra merged, X-Gone removed, 12", h, resp.ContentLength)
	}
	half := make([]byte, 6)
	if _, err := io.ReadFull(resp.Body, half); err != nil || string(half) != `{"abcd` {
		t.Errorf("first half = %q, %v; want {\"abcd", half, err)
	}
}
