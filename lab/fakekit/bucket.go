package fakekit

import (
	"math"
	"time"
)

// Bucket is one rate limit as OpenAI-style providers enforce it: a bucket
// that refills continuously at PerMinute a minute, holds a window's share
// of a minute's budget, and starts full. A charge may leave it in debt
// (negative). A Bucket is not safe for concurrent use: the fake holds its
// own lock around the buckets it checks together.
type Bucket struct {
	perMinute int
	capacity  float64
	level     float64
	refilled  time.Time
}

// NewBucket returns a full bucket for perMinute, holding window's share of
// a minute (a minute when window is zero or longer; never less than 1).
func NewBucket(perMinute int, window time.Duration, now time.Time) *Bucket {
	if window <= 0 {
		window = time.Minute
	}
	c := max(float64(perMinute)*min(window, time.Minute).Minutes(), 1)
	return &Bucket{perMinute: perMinute, capacity: c, level: c, refilled: now}
}

// PerMinute is the refill rate.
func (b *Bucket) PerMinute() int { return b.perMinute }

// Capacity is what the bucket holds when full.
func (b *Bucket) Capacity() float64 { return b.capacity }

// Level is what the bucket holds now (as of the last Refill).
func (b *Bucket) Level() float64 { return b.level }

// Remaining is the whole units left, never negative.
func (b *Bucket) Remaining() int { return int(max(math.Floor(b.level), 0)) }

// Refill adds what the bucket gained since the last refill.
func (b *Bucket) Refill(now time.Time) {
	if !now.After(b.refilled) {
		return
	}
	minutes := now.Sub(b.refilled).Minutes()
	b.refilled = now
	b.level = min(b.level+float64(b.perMinute)*minutes, b.capacity)
}

// Take charges n, even into debt.
func (b *Bucket) Take(n float64) { b.level -= n }

// Until is how long the bucket takes to gain deficit, rounded up to the
// millisecond (at least one); zero when deficit <= 0.
func (b *Bucket) Until(deficit float64) time.Duration {
	if deficit <= 0 || b.perMinute <= 0 {
		return 0
	}
	// The small allowance keeps float noise (0.05000000000000004 of a
	// request) from adding a millisecond.
	ms := deficit / float64(b.perMinute) * float64(time.Minute/time.Millisecond)
	return max(time.Duration(math.Ceil(ms-1e-6))*time.Millisecond, time.Millisecond)
}

// UntilFull is how long the bucket takes to be full again.
func (b *Bucket) UntilFull() time.Duration { return b.Until(b.capacity - b.level) }
