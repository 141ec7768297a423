package api

import (
	"math"
	"sync"
	"time"
)

// IntakeLimit is one tenant's intake quota (config tenants[].intake): a
// token bucket refilled at RPS deliveries a second, holding at most Burst.
type IntakeLimit struct {
	RPS   float64
	Burst int
}

// intakeLimiter holds one bucket per limited tenant. It is safe for
// concurrent use; each process keeps its own buckets.
type intakeLimiter struct {
	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	limit  IntakeLimit
	tokens float64
	last   time.Time
}

func newIntakeLimiter(limits map[string]IntakeLimit) *intakeLimiter {
	l := &intakeLimiter{buckets: map[string]*bucket{}}
	for tenant, lim := range limits {
		if lim.RPS <= 0 {
			continue
		}
		if lim.Burst < 1 {
			lim.Burst = max(1, int(math.Ceil(lim.RPS)))
		}
		l.buckets[tenant] = &bucket{limit: lim, tokens: float64(lim.Burst)}
	}
	return l
}

// take spends one delivery of tenant's quota at now. When the bucket is
// empty it returns false and how long until one delivery is allowed.
func (l *intakeLimiter) take(tenant string, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[tenant]
	if b == nil {
		return true, 0
	}
	if !b.last.IsZero() && now.After(b.last) {
		b.tokens = math.Min(float64(b.limit.Burst), b.tokens+now.Sub(b.last).Seconds()*b.limit.RPS)
	}
	if b.last.IsZero() || now.After(b.last) {
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / b.limit.RPS * float64(time.Second))
}
