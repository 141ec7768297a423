package fakekit

import (
	"math/rand/v2"
	"sync"
)

// Faults is a fake's scripted fault queue, generic over the provider's own
// Fault type, with optional random faults for drills. It is safe for
// concurrent use.
type Faults[F any] struct {
	mu     sync.Mutex
	queue  []F
	rate   float64
	rng    *rand.Rand
	random []F
}

// NewFaults returns an empty queue. Once the queue is empty, a share rate
// of calls is answered with one of random, picked uniformly; the draws are
// reproducible from seed. stream tells fakes apart so that two providers
// given the same seed do not fault in lockstep.
func NewFaults[F any](seed int64, stream uint64, rate float64, random ...F) *Faults[F] {
	return &Faults[F]{rate: rate, random: random, rng: NewRand(seed, stream)}
}

// Enqueue scripts faults for the next calls, in order.
func (q *Faults[F]) Enqueue(faults ...F) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.queue = append(q.queue, faults...)
}

// Next pops the next scripted fault or draws a random one; ok is false when
// the call is to be answered normally.
func (q *Faults[F]) Next() (ft F, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.queue) > 0 {
		ft = q.queue[0]
		q.queue = q.queue[1:]
		return ft, true
	}
	if q.rate > 0 && len(q.random) > 0 && q.rng.Float64() < q.rate {
		return q.random[q.rng.IntN(len(q.random))], true
	}
	return ft, false
}

// Pending returns how many scripted faults are left.
func (q *Faults[F]) Pending() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue)
}

// NewRand returns a PCG generator for seed on its own stream: draws on one
// stream never move another's.
func NewRand(seed int64, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed), stream))
}
