package pipeline

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/stetlabs/stet/ledger"
)

// stageGrouper group-commits the extract stage's ledger writes, as intake does
// for deliveries: a worker hands its claim (the attempt token and the
// attempt's intent) or its finished result (artifact, attempt, review
// record, River completion) to a committer, which commits every item
// queued since its previous commit in one transaction and one fsync. The
// group runs without savepoints; when an item fails it is rolled back and
// run again with a savepoint per item, so a failing item (a stale attempt
// token: the fence) rolls back alone and its worker gets its own error.
//
// A worker waits for its item's outcome before it goes on, so what a stage
// does after its write (answer River, reach a crash point) happens only
// once that write is durable, exactly as with a transaction of its own.
// An item never makes a network call: a group holds its transaction only
// for the ledger writes of the items in it. Groups are for SQLite, whose
// one writer every transaction takes in turn; on PostgreSQL each item
// commits in a transaction of its own (parallelStageCommitters says why).
type stageGrouper struct {
	p    *Pipeline
	reqs chan *groupedItem // unbuffered: a request is either taken by a committer or never sent
	done chan struct{}
	once sync.Once
	wg   sync.WaitGroup
	n    int         // committers
	on   atomic.Bool // the committers run

	// waiting counts requests handed over and not yet taken into a group;
	// groups counts the groups committed. Tests read them.
	waiting atomic.Int64
	groups  atomic.Int64
}

type groupedItem struct {
	// key orders the group's items (the report ID): every committer takes
	// report-row locks in the same order, so two groups on PostgreSQL
	// wait for each other instead of deadlocking.
	key  string
	ctx  context.Context // the worker's: its values (River's client, the item's span), not its deadline
	span trace.Span      // the item's own transaction span, in its stage's trace
	fn   func(ctx context.Context, tx *sql.Tx) error
	err  error
	done chan struct{}
}

// maxStageGroup bounds one group; a group holds at most one item per
// extract worker, so it is rarely reached.
const maxStageGroup = 128

// parallelStageCommitters is how many groups commit at once on
// PostgreSQL: none. There each stage transaction runs on its own
// connection, in parallel with the others, and the server's WAL flush
// already lets concurrent commits share an fsync; funnelling the items
// through committers serializes their round trips instead. Measured with
// `stetlab bench pipeline` on durable PostgreSQL (docs/benchmarks.md): 0.41–0.45×
// River's no-op rate with a transaction per item, 0.32–0.35× with two
// committers, 0.18–0.28× with two or sixteen in a second series. SQLite has
// one writer, which every transaction takes in turn: one committer.
const parallelStageCommitters = 0

// stageGroupTimeout bounds one group commit: a queued item is finished even if
// its worker's stage was cancelled, but never waits forever on a database
// that vanished without closing its connections.
const stageGroupTimeout = 30 * time.Second

func newStageGrouper(p *Pipeline) *stageGrouper {
	return &stageGrouper{p: p, reqs: make(chan *groupedItem), done: make(chan struct{})}
}

// start runs the committers.
func (s *stageGrouper) start() {
	n := 1
	if !s.p.db.OneWriter() {
		n = parallelStageCommitters
	}
	s.n = n
	if n == 0 {
		return // each item commits in a transaction of its own
	}
	s.on.Store(true)
	for i := 0; i < n; i++ {
		s.wg.Add(1)
		go s.loop()
	}
}

// stop ends the committers once the group in progress has committed. Call
// it after River has stopped: no stage is then waiting for a group.
func (s *stageGrouper) stop() {
	s.once.Do(func() { close(s.done) })
	s.wg.Wait()
	s.on.Store(false)
}

// grouped runs fn in the next group transaction, under a span named for op
// in ctx's trace, and returns fn's error once that transaction has
// committed, or the group's error if it did not commit. fn must write only
// the ledger (and River's rows), must be safe to run again (a group is
// rerun when one of its items fails), and gets a context bound to the
// group, not to ctx. key is the report ID of the job fn writes. Without
// running committers (stopped, or never started) fn runs in a
// transaction of its own.
func (p *Pipeline) grouped(ctx context.Context, op, key string, fn func(ctx context.Context, tx *sql.Tx) error) error {
	s := p.grouper
	if !s.on.Load() {
		return p.inTx(ctx, op, fn)
	}
	ctx, span := p.tracer.Start(ctx, "ledger.tx "+op, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrLedgerOp.String(op), attrDBSystem.String(p.db.System())))
	defer span.End()
	r := &groupedItem{key: key, ctx: context.WithoutCancel(ctx), span: span, fn: fn, done: make(chan struct{})}
	s.waiting.Add(1)
	select {
	case s.reqs <- r:
	case <-s.done:
		// Stopping: a transaction of its own, under the span started.
		s.waiting.Add(-1)
		return p.db.InTx(ctx, func(tx *sql.Tx) error { return fn(ctx, tx) })
	case <-ctx.Done():
		s.waiting.Add(-1)
		return ctx.Err()
	}
	// Once taken, the item is committed or failed whatever the caller
	// does: wait for the outcome so it is never half-known.
	<-r.done
	if r.err != nil {
		// The status says that it failed, not why.
		span.SetStatus(codes.Error, "")
	}
	return r.err
}

func (s *stageGrouper) loop() {
	defer s.wg.Done()
	batch := make([]*groupedItem, 0, maxStageGroup)
	for {
		batch = batch[:0]
		select {
		case r := <-s.reqs:
			batch = append(batch, r)
		case <-s.done:
			return
		}
	gather:
		for len(batch) < maxStageGroup {
			select {
			case r := <-s.reqs:
				batch = append(batch, r)
			default:
				break gather
			}
		}
		s.waiting.Add(-int64(len(batch)))
		s.commit(batch)
	}
}

func (s *stageGrouper) commit(batch []*groupedItem) {
	ctx, cancel := context.WithTimeout(context.Background(), stageGroupTimeout)
	defer cancel()
	sort.SliceStable(batch, func(i, j int) bool { return batch[i].key < batch[j].key })
	// One item alone needs no savepoint: its error rolls back the
	// transaction that holds only it.
	err := s.p.groupCommit(len(batch) > 1, func(savepoints bool) error { return s.commitGroup(ctx, batch, savepoints) })
	if err == nil {
		s.groups.Add(1)
	}
	for _, r := range batch {
		if err != nil {
			r.err = err
		}
		close(r.done)
	}
}

func (s *stageGrouper) commitGroup(ctx context.Context, batch []*groupedItem, savepoints bool) error {
	p := s.p
	links := make([]trace.Link, 0, len(batch))
	for _, r := range batch {
		links = append(links, trace.Link{SpanContext: r.span.SpanContext()})
	}
	// The span keeps the name traces have always had.
	return p.inTx(ctx, "settle.group_commit", func(ctx context.Context, tx *sql.Tx) error {
		for i, r := range batch {
			r.err = nil
			// The item sees its worker's values (River's client for the
			// completion; its own span, so what it enqueues stays in its
			// stage's trace) and the group's deadline.
			ictx := itemContext{Context: r.ctx, group: ctx}
			if len(batch) == 1 {
				return r.fn(ictx, tx)
			}
			if !savepoints {
				if err := r.fn(ictx, tx); err != nil {
					return errItemFailed
				}
				continue
			}
			err := ledger.Savepoint(ctx, tx, fmt.Sprintf("s%d", i), func() error { return r.fn(ictx, tx) })
			if errors.Is(err, ledger.ErrSavepoint) {
				return err
			}
			r.err = err
		}
		return nil
	}, trace.WithNewRoot(), trace.WithLinks(links...), trace.WithAttributes(attrGroupSize.Int(len(batch))))
}

// itemContext is an item's context inside a group: the values of the
// worker's context, the deadline and cancellation of the group's.
type itemContext struct {
	context.Context // the worker's, without its cancellation
	group           context.Context
}

func (c itemContext) Deadline() (time.Time, bool) { return c.group.Deadline() }
func (c itemContext) Done() <-chan struct{}       { return c.group.Done() }
func (c itemContext) Err() error                  { return c.group.Err() }
