package bench

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/stetlabs/stet/lab/cluster"
	"github.com/stetlabs/stet/ledger"
)

// RiverDriversOptions are the settings of RiverDrivers.
type RiverDriversOptions struct {
	Database string // the postgres:// server (required)
	N        int    // no-op jobs
}

// RiverDriversResult is RiverDrivers' printout: the two drivers' no-op
// throughput as a ratio, then each driver and fetch setting with jobs
// enqueued the way stet enqueues its stage jobs.
type RiverDriversResult struct {
	Result
	Variants []RiverVariant `json:"variants"`
}

// RiverVariant is one driver and fetch setting under two loads, each job
// inserted by its own transaction (InsertTx, as stet enqueues a stage job
// in the transaction that records the stage before it): a burst of n jobs
// from 16 goroutines, and a trickle of one job every 10 ms, which leaves
// the workers idle between jobs, so that pickup waits for a poll or a
// notification. Latency is from the inserting transaction's commit to the
// worker's start.
type RiverVariant struct {
	Driver        string        `json:"driver"`
	Listener      bool          `json:"listener"` // LISTEN/NOTIFY (riverpgxv5); else poll only
	PollInterval  time.Duration `json:"fetch_poll_interval_ns"`
	FetchCooldown time.Duration `json:"fetch_cooldown_ns"`
	BurstRate     float64       `json:"burst_jobs_per_s"`
	BurstP50      time.Duration `json:"burst_p50_ns"`
	TrickleP50    time.Duration `json:"trickle_p50_ns"`
	TrickleP95    time.Duration `json:"trickle_p95_ns"`
}

// WriteText prints the ratio, then a line per variant.
func (r *RiverDriversResult) WriteText(w io.Writer) {
	r.Result.WriteText(w)
	fmt.Fprintf(w, "  jobs inserted in their own transactions (InsertTx), 16 workers: burst of %d from 16 goroutines; trickle of one every 10 ms\n", r.Count)
	for _, v := range r.Variants {
		mode := "poll only"
		if v.Listener {
			mode = "LISTEN/NOTIFY"
		}
		fmt.Fprintf(w, "  %-16s %-13s poll %-6s cooldown %-5s  burst %7.1f jobs/s p50 %-8s  trickle p50 %-8s p95 %s\n",
			v.Driver, mode, v.PollInterval, v.FetchCooldown, v.BurstRate, v.BurstP50.Round(100*time.Microsecond),
			v.TrickleP50.Round(100*time.Microsecond), v.TrickleP95.Round(100*time.Microsecond))
	}
}

// RiverDrivers measures River's two PostgreSQL drivers on the same server:
// no-op jobs/s with riverdatabasesql (what stet uses: the ledger and River
// share each database/sql transaction) against riverpgxv5 (pgx's own pool,
// which stet's database/sql ledger could not share a transaction with);
// then both with jobs inserted inside transactions, riverpgxv5 with its
// LISTEN/NOTIFY listener and riverdatabasesql polling, at several fetch
// settings.
func RiverDrivers(ctx context.Context, o RiverDriversOptions) (*RiverDriversResult, error) {
	res := &RiverDriversResult{Result: Result{Name: "river-drivers", Subject: "riverdatabasesql (what stet uses)", Unit: "no-op jobs/s",
		Baseline: "riverpgxv5 (pgxpool), same server, 16 workers, one insert per transaction"}}
	if o.Database == "" {
		return nil, fmt.Errorf("river-drivers needs --database postgres://…")
	}
	// on runs fn with a fresh scratch schema, opened both ways.
	on := func(fn func(db *ledger.DB, pool *pgxpool.Pool) error) error {
		database, drop, err := cluster.ScratchSchema(ctx, o.Database)
		if err != nil {
			return err
		}
		defer drop()
		db, err := ledger.Open(ctx, database)
		if err != nil {
			return err
		}
		defer db.Close()
		pool, err := pgxpool.New(ctx, database)
		if err != nil {
			return err
		}
		defer pool.Close()
		if res.Settings == "" {
			res.Settings = dbSettings(ctx, db)
		}
		return fn(db, pool)
	}
	err := on(func(db *ledger.DB, _ *pgxpool.Pool) (err error) {
		res.Elapsed, err = riverNoop(ctx, riverdatabasesql.New(db.Writer()), o.N, nil)
		return err
	})
	if err == nil {
		err = on(func(_ *ledger.DB, pool *pgxpool.Pool) (err error) {
			res.BaselineElapsed, err = riverNoop(ctx, riverpgxv5.New(pool), o.N, nil)
			return err
		})
	}
	if err != nil {
		return nil, err
	}
	res.Count, res.BaselineCount = o.N, o.N
	res.finish()

	for _, v := range []RiverVariant{
		{Driver: "riverdatabasesql", PollInterval: 20 * time.Millisecond, FetchCooldown: 20 * time.Millisecond},  // stet's benchmarks
		{Driver: "riverdatabasesql", PollInterval: 200 * time.Millisecond, FetchCooldown: 25 * time.Millisecond}, // stet's default
		{Driver: "riverdatabasesql", PollInterval: 50 * time.Millisecond, FetchCooldown: 5 * time.Millisecond},
		{Driver: "riverpgxv5", Listener: true, PollInterval: 200 * time.Millisecond, FetchCooldown: 25 * time.Millisecond},
		{Driver: "riverpgxv5", Listener: true, PollInterval: time.Second, FetchCooldown: 5 * time.Millisecond},
		{Driver: "riverpgxv5", PollInterval: 200 * time.Millisecond, FetchCooldown: 25 * time.Millisecond}, // poll only
	} {
		err := on(func(db *ledger.DB, pool *pgxpool.Pool) error {
			if v.Driver == "riverdatabasesql" {
				return riverVariant(ctx, riverdatabasesql.New(db.Writer()), &v, o.N, func(ctx context.Context, fn func(*sql.Tx) error) error {
					return inTx(ctx, db.Writer(), fn)
				})
			}
			return riverVariant(ctx, riverpgxv5.New(pool), &v, o.N, func(ctx context.Context, fn func(pgx.Tx) error) error {
				return pgx.BeginFunc(ctx, pool, fn)
			})
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", v.Driver, err)
		}
		res.Variants = append(res.Variants, v)
	}
	return res, nil
}

type timedArgs struct {
	I int `json:"i"`
}

func (timedArgs) Kind() string { return "bench_timed" }

type timedWorker struct {
	river.WorkerDefaults[timedArgs]
	started []atomic.Int64 // unix nanos, by job index
	done    *atomic.Int64
}

func (w *timedWorker) Work(ctx context.Context, job *river.Job[timedArgs]) error {
	w.started[job.Args.I].Store(time.Now().UnixNano())
	w.done.Add(1)
	return nil
}

// riverVariant measures v on driver: the burst and the trickle, each job
// inserted by its own transaction through inTx.
func riverVariant[TTx any](ctx context.Context, driver riverdriver.Driver[TTx], v *RiverVariant, n int,
	inTx func(context.Context, func(TTx) error) error) error {
	m, err := rivermigrate.New(driver, nil)
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return err
	}
	const trickle = 200
	total := n + trickle
	var done atomic.Int64
	worker := &timedWorker{started: make([]atomic.Int64, total), done: &done}
	committed := make([]atomic.Int64, total)
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client, err := river.NewClient(driver, &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 16}},
		Workers:           workers,
		FetchPollInterval: v.PollInterval,
		FetchCooldown:     v.FetchCooldown,
		PollOnly:          !v.Listener,
	})
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	defer client.Stop(context.WithoutCancel(ctx))
	insert := func(i int) error {
		err := inTx(ctx, func(tx TTx) error {
			_, err := client.InsertTx(ctx, tx, timedArgs{I: i}, nil)
			return err
		})
		committed[i].Store(time.Now().UnixNano())
		return err
	}
	wait := func(want int64) error {
		deadline := time.Now().Add(10 * time.Minute)
		for done.Load() < want {
			if time.Now().After(deadline) {
				return fmt.Errorf("river worked %d of %d jobs in 10m", done.Load(), want)
			}
			time.Sleep(time.Millisecond)
		}
		return nil
	}
	latencies := func(from, to int) []time.Duration {
		out := make([]time.Duration, 0, to-from)
		for i := from; i < to; i++ {
			out = append(out, max(0, time.Duration(worker.started[i].Load()-committed[i].Load())))
		}
		slices.Sort(out)
		return out
	}
	start := time.Now()
	if err := parallel(n, 16, insert); err != nil {
		return err
	}
	if err := wait(int64(n)); err != nil {
		return err
	}
	v.BurstRate = float64(n) / time.Since(start).Seconds()
	v.BurstP50 = latencies(0, n)[n/2]
	for i := n; i < total; i++ {
		if err := insert(i); err != nil {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := wait(int64(total)); err != nil {
		return err
	}
	l := latencies(n, total)
	v.TrickleP50, v.TrickleP95 = l[len(l)/2], l[len(l)*95/100]
	return nil
}
