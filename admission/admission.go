// Package admission paces the calls stet sends to one processor so that it
// uses the provider's limits fully without drawing 429s: a concurrency cap,
// token buckets for requests and tokens per minute (estimated before a call,
// corrected from the reported usage after it), and AIMD back-off when the
// provider answers 429 anyway.
//
// A Limiter must never sleep or block its caller: Admit answers at once,
// with a ticket or with how long to wait, and the caller (the pipeline)
// snoozes the job without spending an attempt, so nothing ever waits on it
// while holding a database transaction. It never sees document text, only
// token counts.
package admission

import (
	"math"
	"sync"
	"time"

	"github.com/stetlabs/stet"
)

// Tuning. The values are the contract the tests check; change them with the
// tests.
const (
	// BurstWindow is how much of the per-minute budget a bucket holds at
	// most: one second's worth (1/60 of the minute), but always at least one
	// request. A cold start may send that much at once and then proceeds at
	// the steady rate. Providers may enforce a per-minute limit over shorter
	// periods (OpenAI: "60,000 requests/minute may be enforced as 1,000
	// requests/second"), so a larger burst would draw 429s that the
	// long-run rate does not explain. A request estimated at more tokens
	// than the token bucket holds is admitted once the bucket is full and
	// leaves it in debt, which later refills repay.
	BurstWindow = time.Second

	// MaxWait caps the wait Admit returns. The caller asks again after it,
	// so a long back-off is served in steps and a share raised meanwhile
	// takes effect.
	MaxWait = time.Minute

	// DefaultBackoff is how long admission stops after a 429 that named no
	// Retry-After.
	DefaultBackoff = time.Second

	// MinMultiplier is the floor of the AIMD multiplier: a 429 halves the
	// effective limits, never below a tenth of the configured ones.
	MinMultiplier = 0.1

	// IncreaseStep is what each call answered without a 429 adds back to the
	// multiplier, up to 1: from one halving to the full limit takes 25
	// answers.
	IncreaseStep = 0.02

	// defaultLatency is the guessed duration of a call before any has
	// finished; it only shapes the wait for a concurrency slot.
	defaultLatency = time.Second

	// minSlotWait is the shortest wait for a concurrency slot, so callers do
	// not spin on a call that runs longer than usual.
	minSlotWait = 100 * time.Millisecond

	// epsilon absorbs float rounding in bucket levels, so that waiting the
	// exact wait Admit returned is always enough.
	epsilon = 1e-6
)

// Limits are a processor's configured limits, for all stet processes
// together. Zero means unlimited; negative values are treated as zero.
type Limits struct {
	RPM         int // requests per minute
	TPM         int // tokens per minute, prompt and completion together
	Concurrency int // calls in flight at once
}

// Limiter is the admission control of one processor in one process. Every
// limit it enforces is the configured one times this process's share times
// the AIMD multiplier. It is safe for concurrent use.
type Limiter struct {
	limits Limits
	clock  stet.Clock

	mu    sync.Mutex
	share float64 // this process's share of the limits, (0, 1]
	mult  float64 // AIMD multiplier, [MinMultiplier, 1]
	// epoch counts multiplier decreases. A ticket remembers the epoch it was
	// admitted in, so several calls in flight that all meet the same
	// congestion halve the limits once, not once each.
	epoch        uint64
	reqs, toks   float64   // bucket levels; negative after a large charge
	last         time.Time // when the levels were last refilled
	inFlight     map[*Ticket]struct{}
	backoffUntil time.Time
	latency      time.Duration // moving average of call durations; 0 until the first
}

// Ticket is one admitted call. Report its outcome with Done, exactly once;
// later calls are ignored.
type Ticket struct {
	l        *Limiter
	est      int
	admitted time.Time
	epoch    uint64
	done     bool // guarded by l.mu
}

// Stats is a snapshot of a Limiter, for metrics and tests.
type Stats struct {
	// RPM and TPM are the effective per-minute limits of this process:
	// configured × Share × Multiplier. Zero means unlimited.
	RPM, TPM float64
	// Concurrency is the effective cap on calls in flight; zero means
	// unlimited.
	Concurrency int
	InFlight    int
	Share       float64
	Multiplier  float64
	// BackoffUntil is when admission resumes after a 429; zero when not
	// backing off.
	BackoffUntil time.Time
}

// New returns a Limiter for l with a share of 1 and full buckets. A nil clock
// is the system clock.
func New(l Limits, clock stet.Clock) *Limiter {
	if clock == nil {
		clock = stet.SystemClock{}
	}
	l.RPM, l.TPM, l.Concurrency = max(l.RPM, 0), max(l.TPM, 0), max(l.Concurrency, 0)
	lim := &Limiter{
		limits:   l,
		clock:    clock,
		share:    1,
		mult:     1,
		last:     clock.Now(),
		inFlight: make(map[*Ticket]struct{}),
	}
	lim.reqs, lim.toks = lim.reqCap(), lim.tokCap()
	return lim
}

// SetShare sets this process's share of the limits (0 < share ≤ 1): with N
// processes sharing one processor, each gets 1/N. It takes effect at once:
// budget accrued so far is kept, up to the new bucket sizes. A share above 1
// is taken as 1; zero, negative or NaN is ignored.
func (l *Limiter) SetShare(share float64) {
	if math.IsNaN(share) || share <= 0 {
		return
	}
	share = min(share, 1)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refill(l.clock.Now())
	l.share = share
	l.clamp()
}

// Admit asks to send one call estimated at estTokens (see EstimateTokens).
// It returns a Ticket, or a wait > 0 and no ticket if the call must not be
// sent yet: no concurrency slot is free, the request or token budget is
// short, or the processor is backing off after a 429. The wait is the time
// until the buckets hold what the call needs and the back-off is over (for a
// concurrency slot, a guess from recent call durations), capped at MaxWait.
// Admit never blocks.
func (l *Limiter) Admit(estTokens int) (*Ticket, time.Duration) {
	estTokens = max(estTokens, 0)
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refill(now)

	var wait time.Duration
	if now.Before(l.backoffUntil) {
		wait = l.backoffUntil.Sub(now)
	}
	if c := l.concurrencyCap(); c > 0 && len(l.inFlight) >= c {
		wait = max(wait, l.slotWait(now))
	}
	if l.limits.RPM > 0 && l.reqs < 1-epsilon {
		wait = max(wait, refillTime(1-l.reqs, l.reqRate()))
	}
	if l.limits.TPM > 0 {
		need := min(float64(estTokens), l.tokCap())
		if l.toks < need-epsilon {
			wait = max(wait, refillTime(need-l.toks, l.tokRate()))
		}
	}
	if wait > 0 {
		return nil, min(wait, MaxWait)
	}

	if l.limits.RPM > 0 {
		l.reqs--
	}
	if l.limits.TPM > 0 {
		l.toks -= float64(estTokens)
	}
	t := &Ticket{l: l, est: estTokens, admitted: now, epoch: l.epoch}
	l.inFlight[t] = struct{}{}
	return t, 0
}

// Done reports the call's outcome. actualTokens is the usage the provider
// reported, prompt and completion together: the token bucket is refunded or
// charged the difference from the estimate. A negative actualTokens means
// the usage is unknown (a timeout, a lost connection) and the estimate
// stands. rateLimited says the provider answered 429; retryAfter is the wait
// it asked for, if any.
//
// A 429 halves the multiplier (once per congestion event: calls admitted
// before the last halving do not halve again) and stops admission until
// retryAfter, or DefaultBackoff when it is zero. Any other outcome, an error
// included, adds IncreaseStep back: only a 429 says the pace was too high.
func (t *Ticket) Done(actualTokens int, rateLimited bool, retryAfter time.Duration) {
	l := t.l
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if t.done {
		return
	}
	t.done = true
	delete(l.inFlight, t)
	l.refill(now)

	if actualTokens >= 0 && l.limits.TPM > 0 {
		l.toks += float64(t.est - actualTokens)
	}
	if d := now.Sub(t.admitted); d >= 0 {
		if l.latency == 0 {
			l.latency = d
		} else {
			l.latency = (4*l.latency + d) / 5
		}
	}
	if rateLimited {
		if t.epoch == l.epoch {
			l.mult = max(l.mult/2, MinMultiplier)
			l.epoch++
		}
		if retryAfter <= 0 {
			retryAfter = DefaultBackoff
		}
		if until := now.Add(retryAfter); until.After(l.backoffUntil) {
			l.backoffUntil = until
		}
	} else {
		l.mult = min(l.mult+IncreaseStep, 1)
	}
	l.clamp()
}

// Stats returns the limiter's current state.
func (l *Limiter) Stats() Stats {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Stats{
		RPM:         float64(l.limits.RPM) * l.share * l.mult,
		TPM:         float64(l.limits.TPM) * l.share * l.mult,
		Concurrency: l.concurrencyCap(),
		InFlight:    len(l.inFlight),
		Share:       l.share,
		Multiplier:  l.mult,
	}
	if now.Before(l.backoffUntil) {
		s.BackoffUntil = l.backoffUntil
	}
	return s
}

// EstimateTokens estimates the tokens a call will be charged before it is
// sent: the prompt's length in bytes divided by four, rounded up (OpenAI's
// rule of thumb of four characters a token; bytes over-count non-ASCII text,
// which errs on the safe side), plus maxOutput, the completion budget.
// Negative inputs count as zero.
func EstimateTokens(prompt string, maxOutput int) int {
	return (len(prompt)+3)/4 + max(maxOutput, 0)
}

// reqRate and tokRate are the effective refill rates, per second.
func (l *Limiter) reqRate() float64 { return float64(l.limits.RPM) * l.share * l.mult / 60 }
func (l *Limiter) tokRate() float64 { return float64(l.limits.TPM) * l.share * l.mult / 60 }

// reqCap and tokCap are the bucket sizes: BurstWindow's worth of the
// effective rate, at least one request.
func (l *Limiter) reqCap() float64 { return max(l.reqRate()*BurstWindow.Seconds(), 1) }
func (l *Limiter) tokCap() float64 { return l.tokRate() * BurstWindow.Seconds() }

// concurrencyCap is Concurrency × share rounded down, at least 1 when a cap
// is configured; 0 means none.
func (l *Limiter) concurrencyCap() int {
	if l.limits.Concurrency == 0 {
		return 0
	}
	return max(int(float64(l.limits.Concurrency)*l.share+epsilon), 1)
}

// refill adds the budget accrued since the last refill. A clock that moved
// backwards adds nothing.
func (l *Limiter) refill(now time.Time) {
	if !now.After(l.last) {
		return
	}
	el := now.Sub(l.last).Seconds()
	l.last = now
	if l.limits.RPM > 0 {
		l.reqs = min(l.reqs+l.reqRate()*el, l.reqCap())
	}
	if l.limits.TPM > 0 {
		l.toks = min(l.toks+l.tokRate()*el, l.tokCap())
	}
}

// clamp keeps the levels within the buckets after the rates changed.
func (l *Limiter) clamp() {
	l.reqs = min(l.reqs, l.reqCap())
	l.toks = min(l.toks, l.tokCap())
}

// slotWait guesses when the oldest call in flight finishes.
func (l *Limiter) slotWait(now time.Time) time.Duration {
	typical := l.latency
	if typical == 0 {
		typical = defaultLatency
	}
	var oldest time.Time
	for t := range l.inFlight {
		if oldest.IsZero() || t.admitted.Before(oldest) {
			oldest = t.admitted
		}
	}
	return max(typical-now.Sub(oldest), minSlotWait)
}

// refillTime is how long a bucket refilling at rate per second takes to gain
// deficit, rounded up to the nanosecond so that waiting it is enough.
func refillTime(deficit, rate float64) time.Duration {
	s := math.Ceil(deficit / rate * 1e9)
	if s >= float64(MaxWait) || math.IsInf(s, 0) || math.IsNaN(s) {
		return MaxWait
	}
	return max(time.Duration(s), 1)
}
