package bench

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/internal/stetclient"
	"github.com/stetlabs/stet/lab/cluster"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/webhook"
)

// IntakeOptions are the settings of Intake.
type IntakeOptions struct {
	Stet        Stet
	Dir         string // scratch folder
	Database    string // a postgres:// server for a scratch schema; "": a scratch SQLite file
	N           int    // deliveries
	Concurrency int    // concurrent HTTP clients
	// Encrypt measures the cost of encryption at rest instead: stet with
	// encryption: against the same stet without, in the same run.
	Encrypt bool
}

// Intake measures accepted deliveries/s at durable commit (20 %
// duplicates) through the real HTTP API, against a raw one-row-per-
// transaction insert into the same database.
func Intake(ctx context.Context, o IntakeOptions) (*Result, error) {
	if o.Encrypt {
		return encryptionCost(ctx, "intake", "deliveries/s", o.Dir, func(dir string, encrypt bool) (int, time.Duration, string, error) {
			return intakeRun(ctx, o, dir, encrypt)
		})
	}
	res := &Result{Name: "intake", Unit: "deliveries/s", Baseline: "raw INSERT, one row per transaction, same database and pool"}
	database, drop, err := cluster.ScratchSchema(ctx, o.Database)
	if err != nil {
		return nil, err
	}
	defer drop()
	b, err := serveWithFake(ctx, o.Stet, o.Dir, database, "api", false)
	if err != nil {
		return nil, err
	}
	defer b.stop()
	res.Settings = dbSettings(ctx, b.app.DB()) + fmt.Sprintf("; %d HTTP clients, 20%% duplicates; workers off", o.Concurrency)
	meter := newCPUMeter(ctx, b.app.DB())
	from := meter.mark()
	jobs, elapsed, err := deliverAll(ctx, b.client, o.N, o.Concurrency)
	if err != nil {
		return nil, err
	}
	res.CPU = meter.cost(from, meter.mark(), o.N)
	if want := o.N - o.N/5; len(jobs) != want {
		return nil, fmt.Errorf("accepted %d deliveries, want %d", len(jobs), want)
	}
	res.Count, res.Elapsed = o.N, elapsed

	// The baseline: the same number of one-row transactions, from the same
	// number of goroutines, on the same pool and file.
	db := b.app.DB().Writer()
	if _, err := db.ExecContext(ctx, `CREATE TABLE bench_raw (id TEXT PRIMARY KEY, body TEXT NOT NULL)`); err != nil {
		return nil, err
	}
	from = meter.mark()
	start := time.Now()
	err = parallel(o.N, o.Concurrency, func(int) error {
		return inTx(ctx, db, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO bench_raw (id, body) VALUES ($1, $2)`, stet.NewID("raw", time.Now()), "Benchmark report body of about the same size as a delivery.")
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	res.BaselineCount, res.BaselineElapsed = o.N, time.Since(start)
	res.BaselineCPU = meter.cost(from, meter.mark(), o.N)

	// The ceiling: the same signed deliveries from the same clients,
	// answered by a server that checks each signature and decodes the
	// body, and writes nothing.
	res.Ceiling = "the same signed requests, answered after the signature check and JSON decode, no ledger"
	res.CeilingCount = o.N
	from = meter.mark()
	if res.CeilingElapsed, err = httpCeiling(ctx, b.client, o.N, o.Concurrency); err != nil {
		return nil, err
	}
	res.CeilingCPU = meter.cost(from, meter.mark(), o.N)
	res.finish()
	return res, nil
}

// httpCeiling delivers n signed bodies, as deliverAll does, to a loopback
// server that verifies each Standard Webhooks signature with stet's own
// verifier, decodes the JSON and answers 202; it returns the elapsed time.
func httpCeiling(ctx context.Context, c *stetclient.Client, n, conc int) (time.Duration, error) {
	v, err := webhook.NewVerifier([]string{c.Secret}, nil)
	if err != nil {
		return 0, err
	}
	var seq atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, "read", http.StatusBadRequest)
			return
		}
		if err := v.Verify(r.Header, body); err != nil {
			http.Error(w, "signature", http.StatusUnauthorized)
			return
		}
		var d struct {
			ExternalID string `json:"external_id"`
			Revision   int64  `json:"revision"`
			Text       string `json:"text"`
		}
		if err := json.Unmarshal(body, &d); err != nil || d.ExternalID == "" {
			http.Error(w, "body", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(api.IntakeResponse{JobID: stet.NewID("job", time.Now()) + fmt.Sprint(seq.Add(1)),
			ReportID: "rep_ceiling", Revision: d.Revision, State: "accepted"})
	}))
	defer srv.Close()
	client := *c
	client.Base = srv.URL
	jobs, elapsed, err := deliverAll(ctx, &client, n, conc)
	if err == nil && len(jobs) != n {
		err = fmt.Errorf("ceiling: %d of %d deliveries answered 202", len(jobs), n)
	}
	return elapsed, err
}

func inTx(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// PipelineOptions are the settings of Pipeline.
type PipelineOptions struct {
	Stet        Stet
	Dir         string // scratch folder
	Database    string // a postgres:// server for a scratch schema; "": a scratch SQLite file
	N           int    // deliveries (20 % duplicates)
	Concurrency int    // concurrent HTTP clients
	// Encrypt measures the cost of encryption at rest instead (as Intake).
	Encrypt bool
}

// Pipeline measures documents/s from accept to committed review record with
// an instant fake OpenAI processor, against River's own no-op jobs/s on the
// same database.
func Pipeline(ctx context.Context, o PipelineOptions) (*Result, error) {
	if o.Encrypt {
		return encryptionCost(ctx, "pipeline", "documents/s", o.Dir, func(dir string, encrypt bool) (int, time.Duration, string, error) {
			return pipelineRun(ctx, o, dir, encrypt)
		})
	}
	res := &Result{Name: "pipeline", Unit: "documents/s", Baseline: "River no-op jobs/s, same database, 16 workers"}
	database, drop, err := cluster.ScratchSchema(ctx, o.Database)
	if err != nil {
		return nil, err
	}
	defer drop()
	b, err := serveWithFake(ctx, o.Stet, filepath.Join(o.Dir, "stet"), database, "all", false)
	if err != nil {
		return nil, err
	}
	res.Settings = dbSettings(ctx, b.app.DB()) + "; instant fake OpenAI over loopback HTTP; 16 extract workers"
	meter := newCPUMeter(ctx, b.app.DB())
	from := meter.mark()
	start := time.Now()
	jobs, _, err := deliverAll(ctx, b.client, o.N, o.Concurrency)
	var end time.Time
	if err == nil {
		end, err = waitCommitted(ctx, b.app.DB(), len(jobs), 10*time.Minute)
	}
	elapsed := end.Sub(start)
	to := meter.mark()
	b.stop()
	if err != nil {
		return nil, err
	}
	res.Count, res.Elapsed = len(jobs), elapsed
	res.CPU = meter.cost(from, to, len(jobs))

	riverDB, dropRiver, err := cluster.ScratchSchema(ctx, o.Database)
	if err != nil {
		return nil, err
	}
	defer dropRiver()
	if riverDB == "" {
		riverDB = "sqlite://" + filepath.Join(o.Dir, "river", "river.db")
	}
	count, elapsed, cpu, err := riverNoopOn(ctx, riverDB, len(jobs))
	if err != nil {
		return nil, err
	}
	res.BaselineCount, res.BaselineElapsed, res.BaselineCPU = count, elapsed, cpu
	res.finish()
	return res, nil
}

// riverNoopOn measures River alone on a fresh database with the same
// settings: n no-op jobs inserted one per transaction (as intake does for
// each document) and worked by 16 workers, start to last completion, and
// the CPU each job cost.
func riverNoopOn(ctx context.Context, database string, n int) (int, time.Duration, *CPUCost, error) {
	db, err := ledger.Open(ctx, database)
	if err != nil {
		return 0, 0, nil, err
	}
	defer db.Close()
	meter := newCPUMeter(ctx, db)
	var from cpuMark
	elapsed, err := riverNoop(ctx, db.RiverDriver(), n, func() { from = meter.mark() })
	if err != nil {
		return 0, 0, nil, err
	}
	return n, elapsed, meter.cost(from, meter.mark(), n), nil
}

type noopArgs struct {
	N int `json:"n"`
}

func (noopArgs) Kind() string { return "bench_noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	done *atomic.Int64
}

func (w *noopWorker) Work(ctx context.Context, job *river.Job[noopArgs]) error {
	w.done.Add(1)
	return nil
}

// riverNoop migrates River with driver, inserts n no-op jobs one per
// transaction, works them with 16 workers, and times first insert to last
// completion. started, if not nil, is called as the timing starts.
func riverNoop[TTx any](ctx context.Context, driver riverdriver.Driver[TTx], n int, started func()) (time.Duration, error) {
	m, err := rivermigrate.New(driver, nil)
	if err != nil {
		return 0, err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return 0, err
	}
	var done atomic.Int64
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{done: &done})
	client, err := river.NewClient(driver, &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 16}},
		Workers:           workers,
		FetchPollInterval: 20 * time.Millisecond,
		FetchCooldown:     20 * time.Millisecond,
	})
	if err != nil {
		return 0, err
	}
	if started != nil {
		started()
	}
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return 0, err
	}
	defer client.Stop(context.WithoutCancel(ctx))
	err = parallel(n, 16, func(i int) error {
		_, err := client.Insert(ctx, noopArgs{N: i}, nil)
		return err
	})
	if err != nil {
		return 0, err
	}
	for done.Load() < int64(n) {
		if time.Since(start) > 10*time.Minute {
			return 0, fmt.Errorf("river worked %d of %d no-op jobs in 10m", done.Load(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start), nil
}
