package pipeline

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// The dispatcher with two committers and holding back: no report or
// webhook-id is ever in two groups committing at once, or twice in one
// group; every delivery is committed exactly once; a report's deliveries
// commit in the order they were queued; and both committers work.
// Without holding back (SQLite), conflicting deliveries share a group.
func TestIntakeDispatcher(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		reports int
		limit   int
		overlap bool // whether two groups must have committed at once
	}{
		// Dense conflicts: nearly every delivery waits behind another.
		{name: "8 reports", reports: 8, limit: maxGroup},
		// Groups of at most 16 from 64 reports: the queue fills several
		// that do not conflict.
		{name: "64 reports", reports: 64, limit: 16, overlap: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			testDispatcherHoldsBack(t, tt.reports, tt.limit, tt.overlap)
		})
	}
	t.Run("no hold back", func(t *testing.T) {
		t.Parallel()
		in := &intake{reqs: make(chan *acceptReq, maxGroup), committers: 1, done: make(chan struct{}), limit: maxGroup}
		started, release := make(chan struct{}, 1), make(chan struct{})
		var groups [][]string
		in.run = func(batch []*acceptReq) {
			started <- struct{}{}
			<-release
			var g []string
			for _, r := range batch {
				g = append(g, r.traceparent)
				close(r.done)
			}
			groups = append(groups, g)
		}
		in.start()
		var reqs []*acceptReq
		for i := range 4 {
			r := &acceptReq{traceparent: fmt.Sprint(i), report: "report-a", delivery: "msg-1", done: make(chan struct{})}
			reqs = append(reqs, r)
			in.reqs <- r
			if i == 0 {
				<-started // the first group holds the first delivery alone
			}
		}
		close(release)
		for _, r := range reqs {
			<-r.done
		}
		in.stop()
		if want := [][]string{{"0"}, {"1", "2", "3"}}; !slices.EqualFunc(groups, want, slices.Equal) {
			t.Errorf("groups = %v, want %v", groups, want)
		}
	})
}

func testDispatcherHoldsBack(t *testing.T, reports, limit int, wantOverlap bool) {
	in := &intake{reqs: make(chan *acceptReq, maxGroup), committers: 2, holdBack: true, done: make(chan struct{}), limit: limit}
	var mu sync.Mutex
	inFlight := map[string]bool{}
	committed := map[string][]int{} // report → the sequence numbers committed, in order
	count := map[int]int{}
	var overlap, maxRunning, running int
	in.run = func(batch []*acceptReq) {
		mu.Lock()
		running++
		maxRunning = max(maxRunning, running)
		seen := map[string]bool{}
		for _, r := range batch {
			for _, k := range []string{"r:" + r.report, "d:" + r.delivery} {
				if inFlight[k] || seen[k] {
					t.Errorf("%s is in two groups at once or twice in one", k)
				}
				seen[k] = true
			}
		}
		for k := range seen {
			inFlight[k] = true
		}
		if running > 1 {
			overlap++
		}
		mu.Unlock()
		time.Sleep(time.Duration(2+rand.IntN(3)) * time.Millisecond)
		mu.Lock()
		for k := range seen {
			delete(inFlight, k)
		}
		for _, r := range batch {
			var n int
			fmt.Sscan(r.traceparent, &n)
			committed[r.report] = append(committed[r.report], n)
			count[n]++
			close(r.done)
		}
		running--
		mu.Unlock()
	}
	in.start()
	const n = 600
	var wg sync.WaitGroup
	for i := range n {
		// Deliveries of a few reports and, now and then, a webhook-id sent
		// again (one every seventh, the key of the delivery before it).
		key := i
		if i%7 == 6 {
			key = i - 1
		}
		r := &acceptReq{traceparent: fmt.Sprint(i), report: fmt.Sprint("report-", i%reports),
			delivery: fmt.Sprint("msg-", key), done: make(chan struct{})}
		in.reqs <- r
		wg.Go(func() { <-r.done })
	}
	wg.Wait()
	in.stop()
	for i := range n {
		if count[i] != 1 {
			t.Errorf("delivery %d committed %d times, want 1", i, count[i])
		}
	}
	for report, seq := range committed {
		if !slices.IsSorted(seq) {
			t.Errorf("%s committed out of order: %v", report, seq)
		}
	}
	if maxRunning > 2 || wantOverlap && overlap == 0 {
		t.Errorf("at most %d groups committed at once (%d overlaps), want 2 and some overlap", maxRunning, overlap)
	}
}
