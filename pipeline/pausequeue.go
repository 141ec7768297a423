package pipeline

import (
	"context"
	"errors"
	"time"

	"github.com/riverqueue/river/rivertype"

	"github.com/stetlabs/stet/ledger"
)

// An idle pause. A dispatch pause that covers every processor this process
// can send to ("all", or a processor pause for each processor a policy in
// force permits) pauses River's
// extract queue, so that no worker claims a job only to snooze it again:
// with 100k jobs queued, claiming each every PausedRecheck kept a quarter of
// a core busy. The jobs still show as waiting (markQueued, once per job).
// Resuming the queue re-admits the backlog as any backlog is: River fetches
// at most the extract queue's workers at a time, and each job passes
// admission toward its processor's limits before it is claimed, so there
// is no thundering herd. A pause that covers only some processors or a
// tenant keeps the claim-and-snooze path (route answers wait).
//
// The pause rows are the truth; the queue follows them: every
// pauseSyncEvery the worker reads them (a read-pool query) and pauses or
// resumes the queue. Every worker process does the same from the same rows
// and the same processor list, so they agree.

// pauseSyncEvery is how often a worker looks at the pause rows.
const pauseSyncEvery = time.Second

// markQueuedBatch is how many queued jobs one page of a look (at most 20
// pages) marks waiting.
const markQueuedBatch = 1000

// pauseCoversAll reports whether scopes stop every processor a job can be
// sent to from this process: the configured processors that a policy in
// force permits (the gate blocks any other).
func (p *Pipeline) pauseCoversAll(scopes []string) bool {
	set := map[string]bool{}
	for _, s := range scopes {
		set[s] = true
	}
	if set["all"] {
		return true
	}
	candidates := 0
	for _, pol := range p.policies {
		for _, id := range pol.Processors {
			if p.cfg.Processors[id] == nil {
				continue
			}
			candidates++
			if !set["processor:"+id] {
				return false
			}
		}
	}
	return candidates > 0
}

// pauseSync is the state of the extract queue as this process last set it.
type pauseSync struct {
	known  bool             // the queue's state was set at least once
	paused bool             // the queue is paused
	walk   ledger.QueueWalk // how far queued jobs are marked waiting
}

// syncPause pauses or resumes the extract queue after the pause rows, and
// marks the paused queue's jobs waiting.
func (p *Pipeline) syncPause(ctx context.Context, st *pauseSync) error {
	scopes, err := ledger.PauseScopes(ctx, p.db.Reader())
	if err != nil {
		return err
	}
	covered := p.pauseCoversAll(scopes)
	if !st.known || covered != st.paused {
		if covered {
			err = p.river.QueuePause(ctx, QueueExtract, nil)
		} else {
			err = p.river.QueueResume(ctx, QueueExtract, nil)
		}
		if err != nil && !errors.Is(err, rivertype.ErrNotFound) {
			return err
		}
		if err == nil {
			st.known, st.paused, st.walk = true, covered, ledger.QueueWalk{}
		}
	}
	if covered && st.paused {
		// A large backlog is marked over several looks.
		walk, err := p.db.MarkQueuedWaiting(ctx, QueueExtract, ExtractArgs{}.Kind(), st.walk, markQueuedBatch, 20, p.clock.Now())
		st.walk = walk // as far as it got, error or not
		if err != nil {
			return err
		}
	}
	return nil
}

// pauseLoop keeps the extract queue in step with the pause rows until
// stop.
func (p *Pipeline) pauseLoop(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	var st pauseSync
	t := time.NewTicker(pauseSyncEvery)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*pauseSyncEvery)
		if err := p.syncPause(ctx, &st); err != nil {
			p.log.Warn("dispatch pause sync failed; retrying", "err", err)
		}
		cancel()
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}
