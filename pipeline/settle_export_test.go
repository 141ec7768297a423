package pipeline

import (
	"context"
	"database/sql"
	"sync"
)

// HoldSettler makes every settle committer wait inside a group of its own
// until release is called, so that results handed over meanwhile queue for
// the next group. It returns once every committer holds. release may be
// called more than once.
func HoldSettler(p *Pipeline) (release func()) {
	rel := make(chan struct{})
	var wg sync.WaitGroup
	for range p.settler.n {
		// One at a time: a hold sent while the previous one waits to be
		// taken would share its group.
		holding := make(chan struct{})
		var once sync.Once
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = p.settle(context.Background(), "test.hold", "", func(ctx context.Context, tx *sql.Tx) error {
				once.Do(func() { close(holding) })
				<-rel
				return nil
			})
		}()
		<-holding
	}
	var once sync.Once
	return func() { once.Do(func() { close(rel) }); wg.Wait() }
}

// SettleCommitters is how many committers the settler runs.
func SettleCommitters(p *Pipeline) int { return p.settler.n }

// SettleWaiting is how many items wait for their group to start.
func SettleWaiting(p *Pipeline) int { return int(p.settler.waiting.Load()) }

// SettleGroups is how many groups the settler has committed.
func SettleGroups(p *Pipeline) int { return int(p.settler.groups.Load()) }
