package outbound

import (
	"context"
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/riverqueue/river"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/metrics"
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
	d *Deliverer
}

// Timeout bounds one sweep: a batch of POSTs per destination, each with
// its own timeout.
func (w *deliverWorker) Timeout(*river.Job[DeliverArgs]) time.Duration {
	return time.Duration(deliverBatch+1) * w.d.cfg.Timeout
}

func (w *deliverWorker) Work(ctx context.Context, _ *river.Job[DeliverArgs]) error {
	return w.d.Deliver(ctx)
}

// Deliverer sends the outbox: record events to the sources' destinations
// and the alert webhook's rows, from a periodic River job.
type Deliverer struct {
	cfg      DelivererConfig
	dests    map[string]Destination // by "source/destination"
	sender   *Sender
	sweeping sync.Mutex // one delivery sweep at a time in this process
}

// DelivererConfig is what a Deliverer needs; the pipeline fills it from
// its own.
type DelivererConfig struct {
	DB           *ledger.DB
	Clock        stet.Clock
	Log          *slog.Logger
	Metrics      *metrics.Metrics
	Destinations []Destination
	// Timeout bounds one POST; a destination's backoff starts at
	// RetryBase and doubles up to RetryMax.
	Timeout, RetryBase, RetryMax time.Duration
	// Alert raises an alert (a disabled destination): a log line and a
	// counter, IDs only.
	Alert func(log *slog.Logger, kind string, args ...any)
}

// NewDeliverer returns the deliverer of cfg's destinations.
func NewDeliverer(cfg DelivererConfig) *Deliverer {
	d := &Deliverer{cfg: cfg, dests: map[string]Destination{}, sender: NewSender(cfg.Timeout, cfg.Clock)}
	for _, dest := range cfg.Destinations {
		d.dests[dest.SourceID+"/"+dest.ID] = dest
	}
	return d
}

// Register adds the delivery sweep's worker.
func (dv *Deliverer) Register(workers *river.Workers) {
	river.AddWorker(workers, &deliverWorker{d: dv})
}

// PeriodicJobs is the delivery sweep every interval (the caller schedules
// it when there is a destination to send to).
func (dv *Deliverer) PeriodicJobs(every time.Duration) []*river.PeriodicJob {
	return []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(every),
		func() (river.JobArgs, *river.InsertOpts) { return DeliverArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true})}
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
func (dv *Deliverer) Deliver(ctx context.Context) error {
	if len(dv.dests) == 0 {
		return nil
	}
	if !dv.sweeping.TryLock() {
		return nil // the previous sweep is still running
	}
	defer dv.sweeping.Unlock()
	due, err := dv.cfg.DB.DueDestinations(ctx, dv.cfg.Clock.Now())
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	for _, ds := range due {
		d, ok := dv.dests[ds.SourceID+"/"+ds.DestinationID]
		if !ok {
			continue // not in this process's config: another process sends it, or it fails at max_age
		}
		wg.Go(func() { dv.deliverTo(ctx, d, ds.Failures) })
	}
	wg.Wait()
	return nil
}

func (dv *Deliverer) deliverTo(ctx context.Context, d Destination, failures int) {
	log := dv.cfg.Log.With("source", d.SourceID, "destination", d.ID, "stage", "deliver")
	rows, err := dv.cfg.DB.ClaimDeliveries(ctx, ledger.ClaimDeliveriesParams{SourceID: d.SourceID, DestinationID: d.ID,
		Now: dv.cfg.Clock.Now(), Lease: 2*dv.cfg.Timeout + 5*time.Second, Limit: deliverBatch})
	if err != nil {
		log.Warn("claim deliveries failed", "err", err)
		return
	}
	answered := 0 // failures in a row this sweep that still got an HTTP answer
	for i, row := range rows {
		if ctx.Err() != nil {
			return // the leases expire; the next sweep sends them
		}
		body, err := dv.deliveryBody(ctx, row)
		if err != nil {
			log.Warn("build delivery body failed", "err", err)
			return
		}
		res := dv.sender.Send(ctx, Message{URL: d.URL, Secret: d.Secret, WebhookID: row.WebhookID, Body: body})
		now := dv.cfg.Clock.Now()
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
				fin.RetryAt = now.Add(dv.deliverBackoff(row.Attempts + 1))
			} else {
				fin.RetryAt = now.Add(max(dv.deliverBackoff(failures+1), res.RetryAfter))
			}
		}
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		err = dv.cfg.DB.FinishDelivery(wctx, fin)
		cancel()
		dv.cfg.Metrics.Deliveries.WithLabelValues(d.SourceID, d.ID, string(fin.Outcome)).Inc()
		if err != nil {
			log.Warn("record delivery failed", "err", err)
			return
		}
		switch fin.Outcome {
		case ledger.OutcomeDisabled:
			dv.cfg.Alert(log, "destination_disabled", "status_code", res.Status)
			return
		case ledger.OutcomeRetry:
			if fin.RowOnly {
				log.Warn("delivery failed; retrying the event later", "status_code", res.Status, "attempt", row.Attempts+1)
				continue
			}
			log.Warn("delivery failed; backing off", "status_code", res.Status, "error_class", fin.Error,
				"attempt", row.Attempts+1, "retry_in_ms", fin.RetryAt.Sub(now).Milliseconds(), "left", len(rows)-i-1)
			if err := dv.cfg.DB.ReleaseDeliveries(context.WithoutCancel(ctx), rows[i+1:]); err != nil {
				log.Warn("release deliveries failed", "err", err)
			}
			return // the rest wait for the destination's backoff
		}
	}
}

// deliveryBody is the POST body of an outbox row: an alert's stored
// IDs-only body, or a record event (docs/design.md §13) read from the record now.
func (dv *Deliverer) deliveryBody(ctx context.Context, row ledger.Delivery) ([]byte, error) {
	if row.SourceID == ledger.AlertSource {
		return row.Payload, nil
	}
	rec, err := dv.cfg.DB.RecordForDelivery(ctx, row)
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
func (dv *Deliverer) deliverBackoff(n int) time.Duration {
	d := dv.cfg.RetryBase
	for i := 1; i < n && d < dv.cfg.RetryMax; i++ {
		d *= 2
	}
	d = min(d, dv.cfg.RetryMax)
	return d/2 + rand.N(d/2+1)
}

// DestinationSpecs are the ledger's view of the configured destinations.
func DestinationSpecs(ds []Destination) []ledger.DestinationSpec {
	var out []ledger.DestinationSpec
	for _, d := range ds {
		out = append(out, ledger.DestinationSpec{SourceID: d.SourceID, DestinationID: d.ID, Events: d.Events, MaxAge: d.MaxAge})
	}
	return out
}
