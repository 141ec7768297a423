package admission

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stetlabs/stet"
)

var t0 = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

// saturate offers calls estimated at est as fast as the limiter admits them
// for span of simulated time, reporting actual tokens at once, and returns
// each admission's offset from the start. It moves the clock only by the
// waits Admit returns.
func saturate(t *testing.T, l *Limiter, clock *stet.ManualClock, est, actual int, span time.Duration) []time.Duration {
	t.Helper()
	start := clock.Now()
	var at []time.Duration
	for clock.Now().Sub(start) < span {
		tk, wait := l.Admit(est)
		if tk == nil {
			if wait <= 0 {
				t.Fatalf("Admit(%d) = nil, %v; want a positive wait", est, wait)
			}
			clock.Advance(wait)
			continue
		}
		at = append(at, clock.Now().Sub(start))
		tk.Done(actual, false, 0)
	}
	return at
}

// countIn counts offsets in [from, from+span).
func countIn(at []time.Duration, from, span time.Duration) int {
	n := 0
	for _, d := range at {
		if d >= from && d < from+span {
			n++
		}
	}
	return n
}

func TestRPMAdmitsTheBudgetPerMinute(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		rpm   int
		share float64
		want  int // admissions in any steady minute
	}{
		{"one a second", 60, 1, 60},
		{"ten a second", 600, 1, 600},
		{"one a minute", 1, 1, 1},
		{"uneven rate", 7, 1, 7},
		{"half share", 90, 0.5, 45},
	}
	for _, tt := range tests {
		clock := stet.NewManualClock(t0)
		l := New(Limits{RPM: tt.rpm}, clock)
		l.SetShare(tt.share)
		at := saturate(t, l, clock, 0, 0, 3*time.Minute)
		if len(at) == 0 || at[0] != 0 {
			t.Fatalf("%s: first admission at %v, want at once (cold start)", tt.name, at[:min(len(at), 1)])
		}
		// A window that starts between two admissions, after the cold
		// start's burst has been spent.
		interval := time.Minute / time.Duration(tt.want)
		from := time.Minute + interval/2
		if got := countIn(at, from, time.Minute); got != tt.want {
			t.Errorf("%s: admissions in the minute from %v = %d, want %d", tt.name, from, got, tt.want)
		}
		burst := max(tt.want/60, 1)
		if got := countIn(at, 0, time.Minute); got > tt.want+burst {
			t.Errorf("%s: admissions in the first minute = %d, want at most %d (budget + burst)", tt.name, got, tt.want+burst)
		}
	}
}

func TestTPMCorrectsEstimates(t *testing.T) {
	t.Parallel()
	// 6000 TPM: 100 tokens a second, a bucket of 100 tokens.
	tests := []struct {
		name        string
		est, actual int
		want        int // admissions in any steady minute
	}{
		{"exact estimate", 50, 50, 120},
		{"over-estimate refunded", 100, 50, 120},
		{"under-estimate charged", 50, 100, 60},
		{"usage unknown keeps the estimate", 100, -1, 60},
		{"estimate larger than the bucket", 300, 300, 20},
	}
	for _, tt := range tests {
		clock := stet.NewManualClock(t0)
		l := New(Limits{TPM: 6000}, clock)
		at := saturate(t, l, clock, tt.est, tt.actual, 3*time.Minute)
		interval := time.Minute / time.Duration(tt.want)
		from := time.Minute + interval/2
		if got := countIn(at, from, time.Minute); got != tt.want {
			t.Errorf("%s: Admit(%d) then Done(%d): admissions in the minute from %v = %d, want %d", tt.name, tt.est, tt.actual, from, got, tt.want)
		}
	}
}

func TestTPMRefundMakesRoomAtOnce(t *testing.T) {
	t.Parallel()
	clock := stet.NewManualClock(t0)
	l := New(Limits{TPM: 6000}, clock) // bucket of 100 tokens
	a, _ := l.Admit(100)
	if a == nil {
		t.Fatal("Admit(100) on a full bucket = nil, want a ticket")
	}
	if tk, wait := l.Admit(40); tk != nil || wait != 400*time.Millisecond {
		t.Fatalf("Admit(40) on an empty bucket = %v, %v; want nil, 400ms", tk, wait)
	}
	a.Done(60, false, 0) // 40 tokens refunded
	if tk, wait := l.Admit(40); tk == nil {
		t.Fatalf("Admit(40) after a 40-token refund = nil, %v; want a ticket", wait)
	}
	// An under-estimate leaves debt that blocks even a call of no tokens.
	b, _ := l.Admit(0)
	clock.Advance(time.Second)
	b.Done(150, false, 0)
	if tk, wait := l.Admit(0); tk != nil || wait != 500*time.Millisecond {
		t.Errorf("Admit(0) with 50 tokens of debt = %v, %v; want nil, 500ms", tk, wait)
	}
}

func TestConcurrencyCap(t *testing.T) {
	t.Parallel()
	tests := []struct {
		conc    int
		share   float64
		wantCap int
	}{
		{3, 1, 3},
		{3, 0.5, 1},
		{4, 0.5, 2},
		{1, 0.1, 1},
		{10, 0.34, 3},
		{3, 1.0 / 3, 1},
	}
	for _, tt := range tests {
		clock := stet.NewManualClock(t0)
		l := New(Limits{Concurrency: tt.conc}, clock)
		l.SetShare(tt.share)
		if got := l.Stats().Concurrency; got != tt.wantCap {
			t.Errorf("Concurrency %d share %v: Stats().Concurrency = %d, want %d", tt.conc, tt.share, got, tt.wantCap)
		}
		var held []*Ticket
		for range tt.wantCap {
			tk, wait := l.Admit(10)
			if tk == nil {
				t.Fatalf("Concurrency %d share %v: Admit #%d = nil, %v; want a ticket", tt.conc, tt.share, len(held)+1, wait)
			}
			held = append(held, tk)
		}
		if tk, wait := l.Admit(10); tk != nil || wait <= 0 {
			t.Errorf("Concurrency %d share %v: Admit beyond the cap = %v, %v; want nil and a wait", tt.conc, tt.share, tk, wait)
		}
		if got := l.Stats().InFlight; got != tt.wantCap {
			t.Errorf("Concurrency %d share %v: InFlight = %d, want %d", tt.conc, tt.share, got, tt.wantCap)
		}
		held[0].Done(10, false, 0)
		if tk, wait := l.Admit(10); tk == nil {
			t.Errorf("Concurrency %d share %v: Admit after a Done = nil, %v; want a ticket", tt.conc, tt.share, wait)
		}
	}
}

func TestConcurrencyWaitFollowsCallDurations(t *testing.T) {
	t.Parallel()
	clock := stet.NewManualClock(t0)
	l := New(Limits{Concurrency: 1}, clock)
	a, _ := l.Admit(0)
	if _, wait := l.Admit(0); wait != defaultLatency {
		t.Errorf("slot wait before any call finished = %v, want %v", wait, defaultLatency)
	}
	clock.Advance(300 * time.Millisecond)
	a.Done(0, false, 0)
	if b, wait := l.Admit(0); b == nil {
		t.Fatalf("Admit after the only call finished = nil, %v; want a ticket", wait)
	}
	clock.Advance(100 * time.Millisecond)
	if _, wait := l.Admit(0); wait != 200*time.Millisecond {
		t.Errorf("slot wait 100ms into a call when calls take 300ms = %v, want 200ms", wait)
	}
	clock.Advance(time.Second)
	if _, wait := l.Admit(0); wait != minSlotWait {
		t.Errorf("slot wait for a call running late = %v, want %v", wait, minSlotWait)
	}
}

func TestAIMD(t *testing.T) {
	t.Parallel()
	clock := stet.NewManualClock(t0)
	l := New(Limits{RPM: 600}, clock)
	a, _ := l.Admit(0)
	b, _ := l.Admit(0)
	if a == nil || b == nil {
		t.Fatal("two Admits on a full bucket of 10: want two tickets")
	}

	a.Done(0, true, 3*time.Second)
	s := l.Stats()
	if s.Multiplier != 0.5 || s.RPM != 300 {
		t.Errorf("after a 429: Multiplier, RPM = %v, %v; want 0.5, 300", s.Multiplier, s.RPM)
	}
	if want := t0.Add(3 * time.Second); !s.BackoffUntil.Equal(want) {
		t.Errorf("after a 429 with Retry-After 3s: BackoffUntil = %v, want %v", s.BackoffUntil, want)
	}
	if tk, wait := l.Admit(0); tk != nil || wait != 3*time.Second {
		t.Errorf("Admit during back-off = %v, %v; want nil, 3s", tk, wait)
	}

	// b was sent before the limits were halved: its 429 is the same
	// congestion, so it extends the back-off but does not halve again.
	b.Done(0, true, 5*time.Second)
	if got := l.Stats().Multiplier; got != 0.5 {
		t.Errorf("after a second 429 from an older call: Multiplier = %v, want 0.5", got)
	}
	if _, wait := l.Admit(0); wait != 5*time.Second {
		t.Errorf("Admit after Retry-After 5s = %v wait, want 5s", wait)
	}

	clock.Advance(5 * time.Second)
	for i := range 25 {
		tk, wait := l.Admit(0)
		if tk == nil {
			clock.Advance(wait)
			tk, wait = l.Admit(0)
			if tk == nil {
				t.Fatalf("success %d: Admit after its wait = nil, %v", i, wait)
			}
		}
		tk.Done(0, false, 0)
		if got := l.Stats().Multiplier; i < 24 && got >= 1 {
			t.Fatalf("after %d successes from 0.5: Multiplier = %v, want < 1", i+1, got)
		}
	}
	if got := l.Stats().Multiplier; got != 1 {
		t.Errorf("after 25 successes from 0.5: Multiplier = %v, want 1", got)
	}

	// Fresh calls meeting fresh 429s halve each time, down to the floor; a
	// 429 without Retry-After backs off DefaultBackoff.
	for _, want := range []float64{0.5, 0.25, 0.125, MinMultiplier, MinMultiplier} {
		clock.Advance(time.Minute)
		tk, wait := l.Admit(0)
		if tk == nil {
			t.Fatalf("Admit after a minute = nil, %v", wait)
		}
		tk.Done(0, true, 0)
		if got := l.Stats().Multiplier; got != want {
			t.Errorf("after another 429: Multiplier = %v, want %v", got, want)
		}
		if _, wait := l.Admit(0); wait != DefaultBackoff {
			t.Errorf("Admit after a 429 without Retry-After: wait %v, want %v", wait, DefaultBackoff)
		}
	}
}

func TestAIMDSlowsTheRate(t *testing.T) {
	t.Parallel()
	clock := stet.NewManualClock(t0)
	l := New(Limits{RPM: 600, TPM: 60000}, clock)
	tk, _ := l.Admit(0)
	tk.Done(0, true, time.Second) // now 300 RPM, 30000 TPM
	// Successes would raise the multiplier, so measure with calls that
	// stay in flight: the request bucket alone paces them.
	start := clock.Now()
	n := 0
	for clock.Now().Sub(start) < 10*time.Second {
		if tk, wait := l.Admit(0); tk == nil {
			clock.Advance(wait)
			continue
		}
		n++
	}
	// 1s of back-off, then a burst of 5 and one every 200ms until 10s
	// (9.8s the last).
	if want := 5 + 44; n != want {
		t.Errorf("admissions in 10s after a 429 at 600 RPM = %d, want %d (half the rate)", n, want)
	}
}

func TestSetShare(t *testing.T) {
	t.Parallel()
	clock := stet.NewManualClock(t0)
	l := New(Limits{RPM: 600, TPM: 60000, Concurrency: 8}, clock)
	l.SetShare(0.5)
	s := l.Stats()
	if s.RPM != 300 || s.TPM != 30000 || s.Concurrency != 4 || s.Share != 0.5 {
		t.Errorf("share 0.5 of 600 RPM, 60000 TPM, 8 calls: Stats() = %+v, want 300, 30000, 4", s)
	}
	for _, share := range []float64{0, -1, math.NaN()} {
		l.SetShare(share)
		if got := l.Stats().Share; got != 0.5 {
			t.Errorf("SetShare(%v): Share = %v, want 0.5 (ignored)", share, got)
		}
	}
	l.SetShare(2)
	if got := l.Stats().Share; got != 1 {
		t.Errorf("SetShare(2): Share = %v, want 1", got)
	}

	// A smaller share takes effect at once: the full bucket of 10 requests
	// shrinks to one.
	l2 := New(Limits{RPM: 600}, clock)
	l2.SetShare(0.1)
	if tk, _ := l2.Admit(0); tk == nil {
		t.Fatal("Admit on a fresh limiter at share 0.1 = nil, want a ticket")
	}
	if tk, wait := l2.Admit(0); tk != nil || wait != time.Second {
		t.Errorf("second Admit at share 0.1 of 600 RPM = %v, %v; want nil, 1s", tk, wait)
	}
}

func TestShareHalvesThroughput(t *testing.T) {
	t.Parallel()
	count := func(share float64) int {
		clock := stet.NewManualClock(t0)
		l := New(Limits{RPM: 600, TPM: 30000}, clock)
		l.SetShare(share)
		at := saturate(t, l, clock, 100, 100, 3*time.Minute)
		return countIn(at, time.Minute+time.Millisecond, time.Minute)
	}
	// 30000 TPM at 100 tokens a call binds at 300 calls a minute.
	full, half := count(1), count(0.5)
	if full != 300 || half != 150 {
		t.Errorf("calls a minute at share 1 and 0.5 = %d, %d; want 300, 150", full, half)
	}
}

func TestWaitIsPositiveAndCapped(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		limits Limits
		share  float64
		prep   func(*Limiter)
		want   time.Duration
	}{
		{"slow rate", Limits{RPM: 1}, 0.01, nil, MaxWait},
		{"long Retry-After", Limits{RPM: 6000}, 1, func(l *Limiter) {
			tk, _ := l.Admit(0)
			tk.Done(0, true, time.Hour)
		}, MaxWait},
		{"huge debt", Limits{TPM: 60}, 1, func(l *Limiter) {
			tk, _ := l.Admit(0)
			tk.Done(1_000_000, false, 0)
		}, MaxWait},
		{"one request a second", Limits{RPM: 60}, 1, nil, time.Second},
	}
	for _, tt := range tests {
		clock := stet.NewManualClock(t0)
		l := New(tt.limits, clock)
		l.SetShare(tt.share)
		if tt.prep != nil {
			tt.prep(l)
		} else if tk, _ := l.Admit(0); tk == nil {
			t.Fatalf("%s: first Admit = nil, want a ticket", tt.name)
		}
		if tk, wait := l.Admit(0); tk != nil || wait != tt.want {
			t.Errorf("%s: Admit = %v, %v; want nil, %v", tt.name, tk, wait, tt.want)
		}
	}
}

func TestDoneTwiceCountsOnce(t *testing.T) {
	t.Parallel()
	clock := stet.NewManualClock(t0)
	l := New(Limits{RPM: 600, Concurrency: 2}, clock)
	a, _ := l.Admit(0)
	b, _ := l.Admit(0)
	a.Done(0, false, 0)
	a.Done(0, true, time.Minute)
	s := l.Stats()
	if s.InFlight != 1 || s.Multiplier != 1 || !s.BackoffUntil.IsZero() {
		t.Errorf("after Done twice on one of two tickets: Stats() = %+v, want 1 in flight, multiplier 1, no back-off", s)
	}
	b.Done(0, false, 0)
	if got := l.Stats().InFlight; got != 0 {
		t.Errorf("InFlight = %d, want 0", got)
	}
}

// TestAdmitNeverBlocks runs Admit against an exhausted limiter whose clock
// never moves: an Admit that waited for budget would never return.
func TestAdmitNeverBlocks(t *testing.T) {
	t.Parallel()
	clock := stet.NewManualClock(t0)
	l := New(Limits{RPM: 1, TPM: 10, Concurrency: 1}, clock)
	first, _ := l.Admit(5)
	if first == nil {
		t.Fatal("first Admit = nil, want a ticket")
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for i := range 16 {
		wg.Go(func() {
			for range 100 {
				tk, wait := l.Admit(5)
				if tk != nil {
					mu.Lock()
					admitted++
					mu.Unlock()
					continue
				}
				if wait <= 0 || wait > MaxWait {
					t.Errorf("Admit = nil, %v; want a wait in (0, %v]", wait, MaxWait)
					return
				}
				if i == 0 {
					l.SetShare(0.5)
					_ = l.Stats()
				}
			}
		})
	}
	wg.Wait()
	if admitted != 0 {
		t.Errorf("Admits on an exhausted limiter with a stopped clock = %d admitted, want 0", admitted)
	}
}

// FuzzLimiter drives a limiter with arbitrary calls and checks its
// invariants: the wait is in (0, MaxWait] exactly when no ticket is given;
// calls in flight never exceed the cap; requests admitted never exceed the
// configured budget plus the burst; and waiting the returned wait is enough
// when no concurrency slot is missing.
func FuzzLimiter(f *testing.F) {
	f.Add(uint16(60), uint16(600), uint8(3), uint8(10), []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add(uint16(1), uint16(0), uint8(0), uint8(5), []byte{0, 0, 0, 200, 17, 3, 3, 3})
	f.Add(uint16(6000), uint16(20), uint8(1), uint8(1), []byte{5, 9, 13, 250, 251, 252, 7, 7, 7, 7, 7})
	f.Fuzz(func(t *testing.T, rpm, tpm uint16, conc, shareTenths uint8, ops []byte) {
		clock := stet.NewManualClock(t0)
		l := New(Limits{RPM: int(rpm), TPM: int(tpm), Concurrency: int(conc % 16)}, clock)
		share := float64(shareTenths%10+1) / 10
		l.SetShare(share)
		var held []*Ticket
		admitted := 0
		for i, op := range ops {
			switch op % 4 {
			case 0, 1: // ask
				est := int(op) * 7
				tk, wait := l.Admit(est)
				if tk != nil {
					if wait != 0 {
						t.Fatalf("op %d: Admit(%d) = ticket, %v; want wait 0", i, est, wait)
					}
					admitted++
					held = append(held, tk)
					break
				}
				if wait <= 0 || wait > MaxWait {
					t.Fatalf("op %d: Admit(%d) = nil, %v; want a wait in (0, %v]", i, est, wait, MaxWait)
				}
				s := l.Stats()
				if wait < MaxWait && (s.Concurrency == 0 || s.InFlight < s.Concurrency) {
					clock.Advance(wait)
					tk, again := l.Admit(est)
					if tk == nil {
						t.Fatalf("op %d: Admit(%d) after waiting %v = nil, %v; want a ticket", i, est, wait, again)
					}
					admitted++
					held = append(held, tk)
				}
			case 2: // finish the oldest call
				if len(held) > 0 {
					held[0].Done(int(op)*3-100, op%8 == 6, time.Duration(op)*time.Millisecond)
					held = held[1:]
				}
			case 3: // let time pass
				clock.Advance(time.Duration(op) * 10 * time.Millisecond)
			}
			s := l.Stats()
			if s.Concurrency > 0 && s.InFlight > s.Concurrency {
				t.Fatalf("op %d: InFlight = %d, want at most %d", i, s.InFlight, s.Concurrency)
			}
			if rpm > 0 {
				elapsed := clock.Now().Sub(t0).Minutes()
				budget := float64(rpm)*share*elapsed + max(float64(rpm)*share/60, 1)
				if float64(admitted) > budget+epsilon {
					t.Fatalf("op %d: %d admitted in %.3f min at %d RPM × %v, want at most %.3f", i, admitted, elapsed, rpm, share, budget)
				}
			}
		}
	})
}

func TestEstimateTokens(t *testing.T) {
	t.Parallel()
	tests := []struct {
		prompt    string
		maxOutput int
		want      int
	}{
		{"", 0, 0},
		{"abcd", 0, 1},
		{"abcde", 0, 2},
		{"abcd", 100, 101},
		{"x", -5, 1},
		{"héllo", 0, 2}, // six bytes
	}
	for _, tt := range tests {
		if got := EstimateTokens(tt.prompt, tt.maxOutput); got != tt.want {
			t.Errorf("EstimateTokens(%q, %d) = %d, want %d", tt.prompt, tt.maxOutput, got, tt.want)
		}
	}
}
