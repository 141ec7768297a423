package pipeline

import (
	"context"
	"database/sql"
	"sync"
)

// HoldSettler makes the settle committer wait inside a group of its own
// until release is called, so that results handed over meanwhile queue for
// the next group. It returns once the committer holds.
func HoldSettler(p *Pipeline) (release func()) {
	holding, rel, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var once sync.Once
	go func() {
		defer close(done)
		_ = p.settle(context.Background(), "test.hold", "", func(ctx context.Context, tx *sql.Tx) error {
			once.Do(func() { close(holding) })
			<-rel
			return nil
		})
	}()
	<-holding
	return func() { close(rel); <-done }
}

// SettleWaiting is how many items wait for their group to start.
func SettleWaiting(p *Pipeline) int { return int(p.settler.waiting.Load()) }

// SettleGroups is how many groups the settler has committed.
func SettleGroups(p *Pipeline) int { return int(p.settler.groups.Load()) }
