package pipeline

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/riverqueue/river"

	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/outbound"
)

// QueueDeliver runs the delivery sweep.
const QueueDeliver = "deliver"

// Destination is one outbound webhook: a source's destination (docs/design.md §13)
// or, with SourceID ledger.AlertSource and ID ledger.AlertDestination, the
// alert webhook (§6).
type Destination struct {
	SourceID string
	ID       string
	URL      string
	Secret   string   // whsec_…
	Events   []string // record events it takes; unused for the alert webhook
	MaxAge   time.Duration
}

// DeliverArgs is the delivery sweep: a periodic River job (leader only)
// that POSTs every due outbox row. IDs only: it has none.
type DeliverArgs struct{}

// Kind implements river.JobArgs.
func (DeliverArgs) Kind() string { return "stet_deliver" }

// InsertOpts implements river.JobArgsWithInsertOpts.
func (DeliverArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Queue: QueueDeliver} }

type deliverWorker struct {
	river.WorkerDefaults[DeliverArgs]
	p *Pipeline
}

// Timeout bounds one sweep: a batch of POSTs per destination, each with
// its own timeout.
func (w *deliverWorker) Timeout(*river.Job[DeliverArgs]) time.Duration {
	return time.Duration(deliverBatch+1) * w.p.cfg.DeliverTimeout
}

func (w *deliverWorker) Work(ctx context.Context, _ *river.Job[DeliverArgs]) error {
	return w.p.Deliver(ctx)
}

// deliverBatch is how many rows of one destination a sweep sends at most;
// after maxRowFailures answered failures in one sweep the destination
// itself backs off.
const (
	deliverBatch   = 20
	maxRowFailures = 2
)

// Deliver runs one delivery sweep: for every destination out of backoff
// with due rows, it leases up to a batch of them, oldest first, and POSTs
// them one after another. Destinations are swept in parallel. A 2xx marks
// the row delivered; a 410 disables the destination for its source. An
// HTTP answer without Retry-After (a 500, a redirect, a 4xx) backs that row
// off alone and the sweep goes on, up to maxRowFailures in a row; no answer
// (refused, timed out), a Retry-After, or a run of failures backs the
// destination off exponentially with jitter, or for the Retry-After asked
// if longer (capped at processor.MaxRetryAfter), and ends its sweep.
// A row past its destination's max_age is failed (invariant 8). Sweeps of
// one process do not overlap; sweeps of several processes lease rows, so a
// row is sent by one at a time — at least once, never lost.
func (p *Pipeline) Deliver(ctx context.Context) error {
	if len(p.dests) == 0 {
		return nil
	}
	if !p.sweeping.TryLock() {
		return nil // the previous sweep is still running
	}
	defer p.sweeping.Unlock()
	due, err := p.db.DueDestinations(ctx, p.clock.Now())
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	for _, ds := range due {
		d, ok := p.dests[ds.SourceID+"/"+ds.DestinationID]
		if !ok {
			continue // not in this process's config: another process sends it, or it fails at max_age
		}
		wg.Go(func() { p.deliverTo(ctx, d, ds.Failures) })
	}
	wg.Wait()
	return nil
}

func (p *Pipeline) deliverTo(ctx context.Context, d Destination, failures int) {
	log := p.log.With("source", d.SourceID, "destination", d.ID, "stage", "deliver")
	rows, err := p.db.ClaimDeliveries(ctx, ledger.ClaimDeliveriesParams{SourceID: d.SourceID, DestinationID: d.ID,
		Now: p.clock.Now(), Lease: 2*p.cfg.DeliverTimeout + 5*time.Second, Limit: deliverBatch})
	if err != nil {
		log.Warn("claim deliveries failed", "err", err)
		return
	}
	answered := 0 // failures in a row this sweep that still got an HTTP answer
	for i, row := range rows {
		if ctx.Err() != nil {
			return // the leases expire; the next sweep sends them
		}
		body, err := p.deliveryBody(ctx, row)
		if err != nil {
			log.Warn("build delivery body failed", "err", err)
			return
		}
		res := p.sender.Send(ctx, outbound.Message{URL: d.URL, Secret: d.Secret, WebhookID: row.WebhookID, Body: body})
		now := p.clock.Now()
		fin := ledger.FinishDeliveryParams{Delivery: row, Status: res.Status, Error: res.Error, Now: now}
		switch {
		case res.OK():
			fin.Outcome = ledger.OutcomeDelivered
			answered = 0
		case res.Gone():
			fin.Outcome = ledger.OutcomeDisabled
		default:
			fin.Outcome = ledger.OutcomeRetry
			if res.Status >= 300 && res.Status < 400 {
				fin.Error = "redirect"
			}
			// An answer without Retry-After is about this event: back it
			// off alone and go on, unless the destination keeps failing.
			// No answer, Retry-After, or a run of failures backs off the
			// whole destination.
			if res.Status != 0 && !res.HasRetryAfter && answered < maxRowFailures {
				answered++
				fin.RowOnly = true
				fin.RetryAt = now.Add(p.deliverBackoff(row.Attempts + 1))
			} else {
				fin.RetryAt = now.Add(max(p.deliverBackoff(failures+1), res.RetryAfter))
			}
		}
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		err = p.db.FinishDelivery(wctx, fin)
		cancel()
		p.cfg.Metrics.Deliveries.WithLabelValues(d.SourceID, d.ID, string(fin.Outcome)).Inc()
		if err != nil {
			log.Warn("record delivery failed", "err", err)
			return
		}
		switch fin.Outcome {
		case ledger.OutcomeDisabled:
			p.alert(log, "destination_disabled", "status_code", res.Status)
			return
		case ledger.OutcomeRetry:
			if fin.RowOnly {
				log.Warn("delivery failed; retrying the event later", "status_code", res.Status, "attempt", row.Attempts+1)
				continue
			}
			log.Warn("delivery failed; backing off", "status_code", res.Status, "error_class", fin.Error,
				"attempt", row.Attempts+1, "retry_in_ms", fin.RetryAt.Sub(now).Milliseconds(), "left", len(rows)-i-1)
			if err := p.db.ReleaseDeliveries(context.WithoutCancel(ctx), rows[i+1:]); err != nil {
				log.Warn("release deliveries failed", "err", err)
			}
			return // the rest wait for the destination's backoff
		}
	}
}

// deliveryBody is the POST body of an outbox row: an alert's stored
// IDs-only body, or a record event (docs/design.md §13) read from the record now.
func (p *Pipeline) deliveryBody(ctx context.Context, row ledger.Delivery) ([]byte, error) {
	if row.SourceID == ledger.AlertSource {
		return row.Payload, nil
	}
	rec, err := p.db.RecordForDelivery(ctx, row)
	if err != nil {
		return nil, err
	}
	return json.Marshal(RecordEvent{Type: row.Event, Record: rec, Sequence: row.Sequence})
}

// RecordEvent is the body of a record delivery (docs/design.md §13).
type RecordEvent struct {
	Type     string                 `json:"type"`
	Record   ledger.RecordEventBody `json:"record"`
	Sequence int64                  `json:"sequence"`
}

// deliverBackoff is the wait after the n-th consecutive failure of a
// destination: DeliverRetryBase doubling, capped at DeliverRetryMax, with
// jitter over its upper half.
func (p *Pipeline) deliverBackoff(n int) time.Duration {
	d := p.cfg.DeliverRetryBase
	for i := 1; i < n && d < p.cfg.DeliverRetryMax; i++ {
		d *= 2
	}
	d = min(d, p.cfg.DeliverRetryMax)
	return d/2 + rand.N(d/2+1)
}

// destinationSpecs are the ledger's view of the configured destinations.
func destinationSpecs(ds []Destination) []ledger.DestinationSpec {
	var out []ledger.DestinationSpec
	for _, d := range ds {
		out = append(out, ledger.DestinationSpec{SourceID: d.SourceID, DestinationID: d.ID, Events: d.Events, MaxAge: d.MaxAge})
	}
	return out
}
