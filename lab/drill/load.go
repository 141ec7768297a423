package drill

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stetlabs/stet/internal/stetclient"
)

// senders deliver the planned load through the api process, retrying each
// delivery until it is acknowledged or given up, and count what they were
// answered.
type senders struct {
	client *stetclient.Client
	dbDown atomic.Bool  // set while the database restarts
	giveUp atomic.Int64 // unix nanos after which a failing delivery gives up; 0: never
	fail   context.CancelCauseFunc

	requests, status5xxRestart, status5xxOther, retryAfter503 atomic.Int64
	connRestart, connOther, retried                           atomic.Int64
}

// run sends every delivery from clients goroutines, delivery i not
// before t0 + window·i/n, each retried until acknowledged or given up.
func (s *senders) run(ctx context.Context, ds []*delivery, t0 time.Time, window time.Duration) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= len(ds) {
					return
				}
				at := t0.Add(time.Duration(float64(window) * float64(i) / float64(len(ds))))
				if !sleep(ctx, time.Until(at)) {
					return
				}
				s.deliver(ctx, ds[i])
			}
		}()
	}
	wg.Wait()
}

func (s *senders) deliver(ctx context.Context, d *delivery) {
	for try := 0; ; try++ {
		down := s.dbDown.Load()
		a, err := s.client.Deliver(ctx, d.Rev.Source, d.WebhookID, d.Rev.Body)
		status, retryAfter, out, problem := a.Status, a.RetryAfter, a.Intake, a.Problem
		down = down || s.dbDown.Load()
		s.requests.Add(1)
		if try > 0 {
			s.retried.Add(1)
		}
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			if down {
				s.connRestart.Add(1)
			} else {
				s.connOther.Add(1)
			}
		case status == http.StatusOK || status == http.StatusAccepted:
			if out.JobID == "" {
				s.fail(fmt.Errorf("delivery %s answered %d without a job_id", d.WebhookID, status))
				return
			}
			d.acked, d.status, d.jobID = true, status, out.JobID
			return
		case status >= 500:
			if down {
				s.status5xxRestart.Add(1)
			} else {
				s.status5xxOther.Add(1)
			}
			if status == http.StatusServiceUnavailable && retryAfter != "" {
				s.retryAfter503.Add(1)
			}
		default:
			// Every body is well formed and signed, and a webhook-id is only
			// ever reused with the same body: a 4xx is the drill's bug.
			s.fail(fmt.Errorf("delivery %s (%s) answered %d %s: a drill bug", d.WebhookID, d.Kind, status, problem))
			return
		}
		if gu := s.giveUp.Load(); gu != 0 && time.Now().UnixNano() > gu {
			d.givenUp = true
			return
		}
		wait := min(100*time.Millisecond<<min(try, 5), 2*time.Second)
		if secs, err := strconv.Atoi(retryAfter); err == nil && secs > 0 {
			wait = min(time.Duration(secs)*time.Second, 5*time.Second)
		}
		if !sleep(ctx, wait) {
			return
		}
	}
}

// sleep sleeps d, or less if ctx ends; it reports whether ctx is live.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
