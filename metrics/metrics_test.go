package metrics

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/stetlabs/stet"
)

// slowCounter takes cost of the collector's clock to count, and has queued
// accepted jobs.
type slowCounter struct {
	clock  *time.Time
	cost   time.Duration
	queued int
	calls  int
}

func (s *slowCounter) JobCounts(context.Context) (map[stet.JobState]int, error) {
	s.calls++
	*s.clock = s.clock.Add(s.cost)
	return map[stet.JobState]int{stet.JobAccepted: s.queued}, nil
}

// A count that took 50 ms is given again for 10 s (200 times as long), then
// read afresh; one that takes 1 s is kept a minute at most.
func TestJobCountsReusedByTheirCost(t *testing.T) {
	now := time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC)
	jobs := &slowCounter{clock: &now, cost: 50 * time.Millisecond}
	c := &jobsCollector{jobs: jobs, now: func() time.Time { return now },
		desc: prometheus.NewDesc("stet_jobs", "Jobs by state.", []string{"state"}, nil)}
	// accepted scrapes once and returns stet_jobs{state="accepted"}.
	accepted := func() int {
		t.Helper()
		ch := make(chan prometheus.Metric, len(stet.JobStates))
		c.Collect(ch)
		close(ch)
		got := -1
		for m := range ch {
			var d dto.Metric
			if err := m.Write(&d); err != nil {
				t.Fatal(err)
			}
			if d.GetLabel()[0].GetValue() == string(stet.JobAccepted) {
				got = int(d.GetGauge().GetValue())
			}
		}
		return got
	}
	for i, s := range []struct {
		after         time.Duration
		cost          time.Duration
		queued, calls int // jobs queued now; counts read so far
		want          int // the gauge
	}{
		{0, 50 * time.Millisecond, 7, 1, 7},
		{5 * time.Second, 50 * time.Millisecond, 8, 1, 7},         // within 200 × 50 ms: the last count
		{4900 * time.Millisecond, 50 * time.Millisecond, 8, 1, 7}, // 9.95 s after the read began
		{100 * time.Millisecond, time.Second, 9, 2, 9},            // 10.05 s: read again, taking 1 s
		{58 * time.Second, time.Second, 10, 2, 9},                 // 59 s after that read began: the last count
		{time.Second, time.Second, 10, 3, 10},                     // 60 s: read again (a minute, not 200 s)
	} {
		now = now.Add(s.after)
		jobs.cost, jobs.queued = s.cost, s.queued
		if got := accepted(); got != s.want || jobs.calls != s.calls {
			t.Fatalf("scrape %d: stet_jobs{state=accepted} = %d after %d counts, want %d after %d", i, got, jobs.calls, s.want, s.calls)
		}
	}
}
