package bench

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// The end-to-end runs of the benchmarks are in cmd/stet (TestBenchRuns,
// TestBenchBatchRuns): they need the wiring of a stet process, which lives
// in package main.

func TestParallel(t *testing.T) {
	t.Parallel()
	var done atomic.Int64
	if err := parallel(100, 8, func(int) error { done.Add(1); return nil }); err != nil || done.Load() != 100 {
		t.Errorf("parallel(100, 8) = %v after %d calls, want nil after 100", err, done.Load())
	}
	boom := errors.New("boom")
	var after atomic.Int64
	err := parallel(1000, 1, func(i int) error {
		if i >= 10 {
			after.Add(1)
		}
		if i == 9 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || after.Load() != 0 {
		t.Errorf("parallel with an error at 9 = %v, %d indexes started after it; want boom and none", err, after.Load())
	}
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	tests := []struct {
		q    float64
		want time.Duration
	}{{0.5, 51 * time.Millisecond}, {0.95, 96 * time.Millisecond}, {1, 100 * time.Millisecond}}
	for _, tt := range tests {
		if got := percentile(ds, tt.q); got != tt.want {
			t.Errorf("percentile(1..100 ms, %v) = %s, want %s", tt.q, got, tt.want)
		}
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("percentile(nil) = %s, want 0", got)
	}
	if ds[0] != 100*time.Millisecond {
		t.Error("percentile sorted its argument in place")
	}
}

// limitShare leaves out the first and last two windows and divides the
// admitted calls per second by the limit's.
func TestLimitShare(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	var ws []openaifake.Window
	for i := range 10 {
		admitted := 10 // the limit: 600 RPM
		if i < 2 || i >= 8 {
			admitted = 1
		}
		ws = append(ws, openaifake.Window{Start: t0.Add(time.Duration(i) * time.Second), Admitted: admitted})
	}
	if got := limitShare(openaifake.Stats{Windows: ws}, 600); got != 1 {
		t.Errorf("limitShare(10 per second for 600 RPM) = %v, want 1", got)
	}
	if got := limitShare(openaifake.Stats{}, 600); got != 0 {
		t.Errorf("limitShare(no windows) = %v, want 0", got)
	}
}
