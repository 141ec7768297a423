package fakekit

import (
	"sync"
	"testing"
)

func TestBumpAndSnapshot(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var counts struct{ A, B int }
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() { Bump(&mu, &counts.A) })
	}
	wg.Wait()
	Bump(&mu, &counts.B)
	got := Snapshot(&mu, &counts)
	counts.A = 0
	if got.A != 50 || got.B != 1 {
		t.Errorf("Snapshot = %+v, want A 50 (concurrent bumps) and B 1", got)
	}
	if !mu.TryLock() {
		t.Fatal("Snapshot left the mutex locked")
	}
}
