package fakekit

import "sync"

// Snapshot returns a copy of *v taken under mu: how a fake hands a test
// the counters its handlers keep writing.
func Snapshot[T any](mu sync.Locker, v *T) T {
	mu.Lock()
	defer mu.Unlock()
	return *v
}

// Bump adds one to the counter *n under mu.
func Bump(mu sync.Locker, n *int) {
	mu.Lock()
	defer mu.Unlock()
	*n++
}
