package fakekit

import (
	"math/rand/v2"
	"sync"
	"time"
)

// Latency draws a per-request latency uniformly from [Min, Max] on its own
// seeded stream, so that fault draws and latency draws do not move each
// other. Max below Min means exactly Min. It is safe for concurrent use.
type Latency struct {
	min, max time.Duration
	mu       sync.Mutex
	rng      *rand.Rand
}

// NewLatency returns a Latency for [lo, hi] seeded from seed on stream.
func NewLatency(seed int64, stream uint64, lo, hi time.Duration) *Latency {
	return &Latency{min: max(lo, 0), max: hi, rng: NewRand(seed, stream)}
}

// Draw returns one latency.
func (l *Latency) Draw() time.Duration {
	if l.max <= l.min {
		return l.min
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.min + time.Duration(l.rng.Int64N(int64(l.max-l.min)+1))
}
