package pipeline

import (
	"context"
	"database/sql"
	"sync"
)

// HoldStageGroups makes every settle committer wait inside a group of its own
// until release is called, so that results handed over meanwhile queue for
// the next group. It returns once every committer holds. release may be
// called more than once.
func HoldStageGroups(p *Pipeline) (release func()) {
	rel := make(chan struct{})
	var wg sync.WaitGroup
	for range p.grouper.n {
		// One at a time: a hold sent while the previous one waits to be
		// taken would share its group.
		holding := make(chan struct{})
		var once sync.Once
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = p.grouped(context.Background(), "test.hold", "", func(ctx context.Context, tx *sql.Tx) error {
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

// StageGroupCommitters is how many committers the stageGrouper runs.
func StageGroupCommitters(p *Pipeline) int { return p.grouper.n }

// StageGroupWaiting is how many items wait for their group to start.
func StageGroupWaiting(p *Pipeline) int { return int(p.grouper.waiting.Load()) }

// StageGroupsCommitted is how many groups the stageGrouper has committed.
func StageGroupsCommitted(p *Pipeline) int { return int(p.grouper.groups.Load()) }
