package pipeline

import (
	"context"
	"database/sql"
	"errors"
	"maps"
	"sync"
	"time"

	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/trace"

	"github.com/stetlabs/stet/internal/crash"
	"github.com/stetlabs/stet/ledger"
)

// intake commits deliveries in groups: whatever is queued when a committer
// is free goes into its next transaction, one call of ledger.Accept (on
// PostgreSQL set-based, River's extract jobs included, in two round trips,
// with several groups committing at once; item by item under savepoints
// after an item failed). One fsync then acknowledges many deliveries,
// which is how intake beats a one-row-per-transaction insert at
// synchronous=FULL.
type intake struct {
	p *Pipeline
	// reqs is the queue of deliveries; one dispatcher gathers it into
	// groups and hands each to a free committer.
	reqs       chan *acceptReq
	committers int
	// holdBack keeps conflicting deliveries out of a group (PostgreSQL).
	holdBack bool
	// run commits one group and answers its deliveries (commit; tests
	// replace it).
	run   func(batch []*acceptReq)
	done  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
	limit int
}

type acceptReq struct {
	params ledger.AcceptParams
	// report is the delivery's report identity (tenant, source, identity
	// hash) and delivery its receipt key (source, webhook-id): the group's
	// lock order and, on PostgreSQL, what makes two deliveries conflict.
	report, delivery string
	// traceparent is the delivery's request span: its extract job
	// continues that trace (the group commit serves many requests).
	traceparent string
	res         ledger.AcceptResult
	err         error
	done        chan struct{}
}

// postgresCommitters is how many groups commit at once on PostgreSQL; it
// stays below the pool size so stage workers keep connections. A group's
// time is mostly round trips (begin with the first statement, the second
// with commit), each about a millisecond on a loaded two-core machine
// whatever the group's size, so while one group waits on them another can
// run.
// docs/benchmarks.md (PostgreSQL intake) has the sweep.
const postgresCommitters = 2

// maxGroup bounds one group commit.
const maxGroup = 256

// newIntake makes the queue and sets the committers: one for SQLite (a
// single writer; more would only queue for the file), several for
// PostgreSQL, whose commits run in parallel and which flushes concurrent
// commits together.
func newIntake(p *Pipeline) *intake {
	n := 1
	if !p.db.OneWriter() {
		n = postgresCommitters
	}
	in := &intake{p: p, reqs: make(chan *acceptReq, maxGroup), committers: n, holdBack: !p.db.OneWriter(),
		done: make(chan struct{}), limit: maxGroup}
	in.run = in.commit
	return in
}

// start runs the dispatcher and its committers.
func (in *intake) start() {
	in.wg.Add(1)
	go in.loop()
}

func (in *intake) stop() {
	in.once.Do(func() { close(in.done) })
	in.wg.Wait()
}

// ErrStopped means intake is shutting down: answer 503.
var ErrStopped = errors.New("intake stopped")

// Accept records one delivery durably and enqueues its extraction. It
// returns only after the transaction holding the revision, the job and the
// extract task has committed (or failed).
func (p *Pipeline) Accept(ctx context.Context, params ledger.AcceptParams) (ledger.AcceptResult, error) {
	r := &acceptReq{params: params, traceparent: traceparentOf(ctx), done: make(chan struct{}),
		report:   params.TenantID + "\x00" + params.SourceID + "\x00" + ledger.IdentityHash(params.Identity, params.ExternalID, params.Text),
		delivery: params.SourceID + "\x00" + params.DeliveryKey}
	select {
	case p.intake.reqs <- r:
	case <-p.intake.done:
		return ledger.AcceptResult{}, ErrStopped
	case <-ctx.Done():
		return ledger.AcceptResult{}, ctx.Err()
	}
	// Once queued, the delivery is committed or failed whatever the caller
	// does: wait for the outcome so it is never half-known.
	<-r.done
	return r.res, r.err
}

// loop is the dispatcher. It gathers a group whenever a committer is free
// and hands it over; while every committer is busy, deliveries queue up
// for the next group.
//
// On PostgreSQL a delivery that shares its report or its webhook-id with
// one in the group, or in a group still committing, waits for a later
// group: in the same group it would cost the ledger a second set of
// statements to see the first one's rows, and beside a group
// still committing it would wait on that group's row locks and then miss
// its rows (a statement's snapshot), running item by item. Later it sees
// them committed, as a plain duplicate or a new revision. SQLite runs a
// group item by item on one committer, where neither happens.
func (in *intake) loop() {
	defer in.wg.Done()
	work := make(chan *group)
	finished := make(chan *group, in.committers)
	var committers sync.WaitGroup
	for range in.committers {
		committers.Go(func() {
			for g := range work {
				in.run(g.batch)
				finished <- g
			}
		})
	}
	inFlight := newKeys()
	free := in.committers
	var spare []*group
	// held are the deliveries held back, in their order; heldKeys their
	// keys, so that a later delivery of the same report or webhook-id waits
	// behind them instead of overtaking.
	var held []*acceptReq
	heldKeys := newKeys()
	finish := func(g *group) {
		inFlight.remove(g.keys)
		free++
		spare = append(spare, g)
	}
	// offer puts r in the group unless it must wait (or the group is full).
	offer := func(g *group, r *acceptReq) {
		if len(g.batch) >= in.limit || in.holdBack && (g.keys.has(r) || inFlight.has(r) || heldKeys.has(r)) {
			held = append(held, r)
			heldKeys.add(r)
			return
		}
		g.add(r)
	}
	// retake offers the held deliveries again, in their order.
	retake := func(g *group) {
		again := held
		held = nil
		heldKeys.reset()
		for _, r := range again {
			offer(g, r)
		}
	}
	for {
		if free == 0 {
			finish(<-finished)
			continue
		}
		var g *group
		if n := len(spare); n > 0 {
			g, spare = spare[n-1], spare[:n-1]
			g.reset()
		} else {
			g = &group{keys: newKeys()}
		}
		retake(g)
		for len(g.batch) == 0 {
			select {
			case r := <-in.reqs:
				offer(g, r)
			case f := <-finished:
				finish(f) // which may free what is held
				retake(g)
			case <-in.done:
				close(work)
				committers.Wait()
				for _, r := range held {
					r.err = ErrStopped
					close(r.done)
				}
				in.drain()
				return
			}
		}
	gather:
		for len(g.batch)+len(held) < in.limit {
			select {
			case r := <-in.reqs:
				offer(g, r)
			default:
				break gather
			}
		}
		inFlight.addAll(g.keys)
		free--
		work <- g
	}
}

// keys is a set of the reports and receipt keys of deliveries. With
// holding back, no key is in two groups committing at once, nor twice in
// one, so a finished group's keys can simply be removed.
type keys struct {
	reports, deliveries map[string]bool
}

func newKeys() *keys {
	return &keys{reports: map[string]bool{}, deliveries: map[string]bool{}}
}

func (k *keys) has(r *acceptReq) bool { return k.reports[r.report] || k.deliveries[r.delivery] }

func (k *keys) add(r *acceptReq) { k.reports[r.report], k.deliveries[r.delivery] = true, true }

func (k *keys) addAll(o *keys) {
	maps.Copy(k.reports, o.reports)
	maps.Copy(k.deliveries, o.deliveries)
}

func (k *keys) remove(o *keys) {
	for key := range o.reports {
		delete(k.reports, key)
	}
	for key := range o.deliveries {
		delete(k.deliveries, key)
	}
}

func (k *keys) reset() {
	clear(k.reports)
	clear(k.deliveries)
}

// group is a batch of deliveries with their keys.
type group struct {
	batch []*acceptReq
	keys  *keys
}

func (g *group) reset() {
	g.batch = g.batch[:0]
	g.keys.reset()
}

func (g *group) add(r *acceptReq) {
	g.batch = append(g.batch, r)
	g.keys.add(r)
}

// drain fails whatever is still queued at shutdown.
func (in *intake) drain() {
	for {
		select {
		case r := <-in.reqs:
			r.err = ErrStopped
			close(r.done)
		default:
			return
		}
	}
}

func (in *intake) commit(batch []*acceptReq) {
	p := in.p
	// A queued delivery is finished even if its caller left, but never
	// waits forever on a database that vanished without closing its
	// connections.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The group's span starts its own trace and links each delivery's
	// request span.
	links := make([]trace.Link, 0, len(batch))
	for _, r := range batch {
		if sc := trace.SpanContextFromContext(contextWithTraceparent(r.traceparent)); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithLinks(links...), trace.WithAttributes(attrGroupSize.Int(len(batch)))}
	ps := make([]ledger.AcceptParams, len(batch))
	for i, r := range batch {
		ps[i] = r.params
	}
	var res []ledger.AcceptResult
	var errs []error
	err := p.inStatement(ctx, "intake.group_commit", func(ctx context.Context, _ ledger.Querier) error {
		enq := extractEnqueue(len(batch))
		for i, r := range batch {
			tp := r.traceparent
			if tp == "" {
				tp = traceparentOf(ctx) // the group's, as traceContext gives a job without one
			}
			enq.Metadata[i] = traceMetadata(tp)
		}
		enq.Insert = p.insertExtracts
		var err error
		res, errs, err = p.db.Accept(ctx, ps, enq)
		return err
	}, opts...)
	if err == nil {
		crash.Point(crash.AfterAccept)
	}
	for i, r := range batch {
		if err != nil {
			r.err, r.res = err, ledger.AcceptResult{}
		} else {
			r.err, r.res = errs[i], res[i]
		}
		close(r.done)
	}
}

// insertExtracts is intake's Enqueue.Insert: River's extract jobs of new
// sync jobs, inside the transaction that accepts them.
func (p *Pipeline) insertExtracts(ctx context.Context, tx *sql.Tx, jobs []ledger.NewExtract) error {
	params := make([]river.InsertManyParams, len(jobs))
	for i, j := range jobs {
		params[i] = river.InsertManyParams{Args: ExtractArgs{JobID: j.JobID}, InsertOpts: &river.InsertOpts{Metadata: j.Metadata}}
	}
	_, err := p.river.InsertManyFastTx(ctx, tx, params)
	return err
}

var errItemFailed = errors.New("an item of the group failed")

// groupCommit runs a group transaction (intake's, the stageGrouper's) up to four
// times: first without savepoints; after an item failed (errItemFailed),
// with a savepoint per item, so that item fails alone; and again after a
// retryable error when retry allows it (two processes' groups touched the
// same rows in opposite orders on PostgreSQL, or the SQLite file was busy).
func (p *Pipeline) groupCommit(retry bool, run func(savepoints bool) error) error {
	savepoints := false
	var err error
	for try := 0; try < 4; try++ {
		err = run(savepoints)
		switch {
		case errors.Is(err, errItemFailed):
			savepoints = true
			continue
		case err != nil && retry && p.db.IsRetryable(err):
			continue
		}
		break
	}
	return err
}

// extractEnqueue describes the River job of an extract stage for
// ledger.Accept, which on PostgreSQL writes it in the statement that
// creates the ledger job (elsewhere insertExtracts inserts it): what InsertManyFastTx would insert for ExtractArgs (its
// kind, its InsertOpts' queue and priority, the client's attempts), with
// room for n deliveries' metadata. River's insert middleware does not run
// for such a row, so the River job has no river.insert_many span; the
// group's ledger.tx span covers it, and traceMetadata carries each
// delivery's trace as traceContext would.
func extractEnqueue(n int) *ledger.Enqueue {
	opts := ExtractArgs{}.InsertOpts()
	return &ledger.Enqueue{Kind: ExtractArgs{}.Kind(), Queue: opts.Queue, Priority: opts.Priority,
		MaxAttempts: maxRiverAttempts, Metadata: make([][]byte, n)}
}
