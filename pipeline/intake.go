package pipeline

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"sync"
	"time"

	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/trace"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/internal/crash"
	"github.com/stetlabs/stet/ledger"
)

// intake commits deliveries in groups: whatever is queued when a committer's
// previous commit finishes goes into its next transaction. On PostgreSQL a
// group runs set-based (ledger.AcceptGroup: two statements for the whole
// group); when an item fails, the group runs again item by item, each
// delivery inside its own savepoint. One fsync then acknowledges many deliveries, which is how
// intake beats a one-row-per-transaction insert at synchronous=FULL.
type intake struct {
	p *Pipeline
	// reqs is each committer's queue. A delivery goes to the committer its
	// report identity hashes to, so a redelivery in flight commits in the
	// same or the next group of the same committer instead of waiting on
	// the report row of another committer's open transaction.
	reqs  []chan *acceptReq
	done  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
	limit int
}

type acceptReq struct {
	params ledger.AcceptParams
	// report is the delivery's report identity (tenant, source, identity
	// hash) and delivery its receipt key (source, webhook-id): the group's
	// lock order and, on PostgreSQL, what makes two deliveries of one group
	// conflict.
	report, delivery string
	// traceparent is the delivery's request span: its extract job
	// continues that trace (the group commit serves many requests).
	traceparent string
	res         ledger.AcceptResult
	err         error
	done        chan struct{}
}

// postgresCommitters is how many groups commit at once on PostgreSQL; it
// stays below the pool size so stage workers keep connections. A
// set-based group costs about the same round trips whatever its size, so
// few committers (bigger groups) beat many. On a machine shared with other
// work 3 measured best of 2, 3, 4, 12, and of 3, 6, 12; on an idle one, with
// two-statement groups, one committer did: `stet bench intake` 4,266 and
// 4,420 deliveries/s against 4,144 and 4,271 for two, 3,561 and 3,785 for
// three, 2,849–2,965 for six and 1,791–1,800 for 24; `stet bench pipeline`
// 718 and 717 documents/s against 651 and 666 for three. With several
// committers each delivery goes to the one its report identity hashes to.
const postgresCommitters = 1

// maxGroup bounds one group commit.
const maxGroup = 256

// newIntake makes the committers' queues: one for SQLite (a single
// writer; more would only queue for the file), several for PostgreSQL,
// whose commits run in parallel and which flushes concurrent commits
// together.
func newIntake(p *Pipeline) *intake {
	n := 1
	if p.db.Dialect() == ledger.Postgres {
		n = postgresCommitters
	}
	in := &intake{p: p, reqs: make([]chan *acceptReq, n), done: make(chan struct{}), limit: maxGroup}
	for i := range in.reqs {
		in.reqs[i] = make(chan *acceptReq, maxGroup)
	}
	return in
}

// start runs the committers, one per queue.
func (in *intake) start() {
	for _, reqs := range in.reqs {
		in.wg.Add(1)
		go in.loop(reqs)
	}
}

// queue returns the committer queue of a delivery's report identity.
func (in *intake) queue(r *acceptReq) chan *acceptReq {
	if len(in.reqs) == 1 {
		return in.reqs[0]
	}
	h := fnv.New32a()
	h.Write([]byte(r.report))
	return in.reqs[h.Sum32()%uint32(len(in.reqs))]
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
	case p.intake.queue(r) <- r:
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

func (in *intake) loop(reqs chan *acceptReq) {
	defer in.wg.Done()
	// On PostgreSQL a delivery that shares its report or its webhook-id
	// with one already in the group waits for the next group: the group
	// runs set-based, and such a delivery would cost it a second set of
	// statements (ledger.AcceptGroup) to see the first one's rows. In the
	// next group it sees them committed, as a plain duplicate or a new
	// revision. SQLite runs a group item by item, where it costs nothing.
	holdBack := in.p.db.Dialect() == ledger.Postgres
	g := &group{}
	var held []*acceptReq
	for {
		g.reset()
		held = g.take(held, holdBack)
		if g.empty() {
			select {
			case r := <-reqs:
				g.add(r)
			case <-in.done:
				in.drain(reqs)
				return
			}
		}
	gather:
		for len(g.batch)+len(held) < in.limit {
			select {
			case r := <-reqs:
				if holdBack && g.conflicts(r) {
					held = append(held, r)
					continue
				}
				g.add(r)
			default:
				break gather
			}
		}
		in.commit(g.batch)
	}
}

// group is the batch a committer gathers, with the keys it holds.
type group struct {
	batch               []*acceptReq
	reports, deliveries map[string]bool
}

func (g *group) reset() {
	g.batch = g.batch[:0]
	if g.reports == nil {
		g.reports, g.deliveries = map[string]bool{}, map[string]bool{}
	}
	clear(g.reports)
	clear(g.deliveries)
}

func (g *group) empty() bool { return len(g.batch) == 0 }

func (g *group) conflicts(r *acceptReq) bool { return g.reports[r.report] || g.deliveries[r.delivery] }

func (g *group) add(r *acceptReq) {
	g.batch = append(g.batch, r)
	g.reports[r.report], g.deliveries[r.delivery] = true, true
}

// take starts the group with the deliveries held back from the last one,
// in their order, and returns those that must wait again (a third
// delivery of one report waits for a third group).
func (g *group) take(held []*acceptReq, holdBack bool) []*acceptReq {
	rest := held[:0]
	for _, r := range held {
		if holdBack && g.conflicts(r) {
			rest = append(rest, r)
			continue
		}
		g.add(r)
	}
	return rest
}

// drain fails whatever is still queued at shutdown.
func (in *intake) drain(reqs chan *acceptReq) {
	for {
		select {
		case r := <-reqs:
			r.err = ErrStopped
			close(r.done)
		default:
			return
		}
	}
}

func (in *intake) commit(batch []*acceptReq) {
	// A queued delivery is finished even if its caller left, but never
	// waits forever on a database that vanished without closing its
	// connections.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Optimistically run the group without savepoints: most deliveries are
	// new or duplicates, neither an error. If any item fails, the group is
	// rolled back and run again with a savepoint per item, so one bad item
	// fails alone.
	err := in.p.groupCommit(true, func(savepoints bool) error { return in.commitGroup(ctx, batch, savepoints) })
	if err == nil {
		crash.Point(crash.AfterAccept)
	}
	for _, r := range batch {
		if err != nil {
			r.err, r.res = err, ledger.AcceptResult{}
		}
		close(r.done)
	}
}

var errItemFailed = errors.New("an item of the group failed")

// groupCommit runs a group transaction (intake's, the settler's) up to four
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

func (in *intake) commitGroup(ctx context.Context, batch []*acceptReq, savepoints bool) error {
	p := in.p
	// The group's span starts its own trace and links each delivery's
	// request span.
	links := make([]trace.Link, 0, len(batch))
	for _, r := range batch {
		if sc := trace.SpanContextFromContext(contextWithTraceparent(r.traceparent)); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	return p.inTx(ctx, "intake.group_commit", func(ctx context.Context, tx *sql.Tx) error {
		var inserts []river.InsertManyParams
		ordered := lockOrder(batch)
		if !savepoints && p.db.Dialect() == ledger.Postgres {
			// One multi-row statement per table for the whole group.
			ps := make([]ledger.AcceptParams, len(ordered))
			for i, r := range ordered {
				ps[i] = r.params
			}
			res, newJob, err := p.db.AcceptGroup(ctx, tx, ps)
			if err != nil {
				return errItemFailed
			}
			for i, r := range ordered {
				r.err, r.res = nil, res[i]
				if newJob[i] && r.params.Mode != stet.ModeBatch {
					inserts = append(inserts, river.InsertManyParams{Args: ExtractArgs{JobID: res[i].JobID},
						InsertOpts: &river.InsertOpts{Metadata: traceMetadata(r.traceparent)}})
				}
			}
			ordered = nil
		}
		for i, r := range ordered {
			r.err, r.res = nil, ledger.AcceptResult{}
			sp := fmt.Sprintf("d%d", i)
			for try := 0; ; try++ {
				var res ledger.AcceptResult
				var newJob bool
				accept := func() error {
					var err error
					res, newJob, err = p.db.Accept(ctx, tx, r.params)
					return err
				}
				var err error
				if savepoints {
					err = ledger.Savepoint(ctx, tx, sp, accept)
				} else {
					err = accept()
				}
				if err != nil {
					if !savepoints {
						return errItemFailed
					}
					if errors.Is(err, ledger.ErrSavepoint) {
						return err
					}
					if errors.Is(err, ledger.ErrRetryItem) && try < 3 {
						continue
					}
					r.err = err
					break
				}
				r.res = res
				if newJob && r.params.Mode != stet.ModeBatch {
					inserts = append(inserts, river.InsertManyParams{Args: ExtractArgs{JobID: res.JobID},
						InsertOpts: &river.InsertOpts{Metadata: traceMetadata(r.traceparent)}})
				}
				break
			}
		}
		if len(inserts) > 0 {
			if _, err := p.river.InsertManyFastTx(ctx, tx, inserts); err != nil {
				return fmt.Errorf("enqueue extract: %w", err)
			}
		}
		return nil
	}, trace.WithNewRoot(), trace.WithLinks(links...), trace.WithAttributes(attrGroupSize.Int(len(batch))))
}

// lockOrder returns the group sorted by report identity. Every committer
// then takes report-row locks in the same order, so two groups racing on
// the same reports (a redelivery committing beside the first delivery) wait
// for each other instead of deadlocking — on PostgreSQL a deadlock costs a
// second before it is detected.
func lockOrder(batch []*acceptReq) []*acceptReq {
	type keyed struct {
		key string
		r   *acceptReq
	}
	ks := make([]keyed, len(batch))
	for i, r := range batch {
		ks[i] = keyed{r.report, r}
	}
	sort.SliceStable(ks, func(i, j int) bool { return ks[i].key < ks[j].key })
	out := make([]*acceptReq, len(batch))
	for i, k := range ks {
		out[i] = k.r
	}
	return out
}
