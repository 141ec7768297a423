package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/config"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/pipeline"
	"github.com/stetlabs/stet/processor/openai/openaifake"
)

const benchUsage = `Usage: stet bench intake|pipeline|provider-limited|batch [flags]

  intake    accepted deliveries/s at durable commit (20 % duplicates), through
            the real HTTP API, vs a raw one-row-per-transaction insert into the
            same database
  pipeline  documents/s from accept to committed review record with an instant
            fake OpenAI processor, vs River's own no-op jobs/s on the same database
  provider-limited
            a fake provider enforcing --rpm with 1–2 s latency: share of the limit
            used, share of calls answered 429, p50/p95 to review record, ledger
            overhead; vs the seeds' naive loop (sleep Retry-After, resend)
  batch     a 10,000-document backfill (-n) through stet import --mode batch into
            the OpenAI Batch API fake: wall time, ledger overhead per item, and
            the provider calls made, vs a request per document
  river-drivers, scaling
            PostgreSQL only (--database): River's two drivers; 1, 2, 4 worker processes

Each figure is printed next to its baseline, measured in the same run, as a ratio.
`

func cmdBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, benchUsage)
		return exitUsage
	}
	fs := flag.NewFlagSet("bench "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	n := fs.Int("n", 5000, "deliveries (intake), documents (pipeline); provider-limited: default one minute of --rpm; batch: default 10000")
	conc := fs.Int("concurrency", 32, "concurrent HTTP clients")
	dir := fs.String("dir", "", "scratch folder (default: a new temporary folder, removed after)")
	database := fs.String("database", "", "run on this PostgreSQL server (postgres://…; a scratch schema is created and dropped) instead of a scratch SQLite file")
	processes := fs.String("processes", "1,2,4", "scaling: the worker process counts to measure")
	binary := fs.String("stet-binary", "", "scaling: the stet binary to start (default: this one)")
	workerProcs := fs.Int("worker-processes", 1, "provider-limited: stet worker processes sharing the limit (above 1 needs --database)")
	rpm := fs.Int("rpm", 600, "provider-limited: the requests-per-minute limit the fake enforces and stet is configured with")
	provConc := fs.Int("provider-concurrency", 32, "provider-limited: calls in flight (stet's limits.concurrency and workers; the naive loop's goroutines)")
	asJSON := fs.Bool("json", false, "print JSON")
	batchSize := fs.Int("batch-size", 2500, "batch: the processor's batch max_items")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	if err := fs.Parse(args[1:]); err != nil {
		return exitUsage
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "stet bench:", err)
			return exitFailure
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "stet bench:", err)
			return exitFailure
		}
		defer pprof.StopCPUProfile()
	}
	scratch := *dir
	if scratch == "" {
		d, err := os.MkdirTemp("", "stet-bench-")
		if err != nil {
			fmt.Fprintln(stderr, "stet bench:", err)
			return exitFailure
		}
		defer os.RemoveAll(d)
		scratch = d
	}
	var res benchResult
	var err error
	if *database != "" && !strings.HasPrefix(*database, "postgres://") && !strings.HasPrefix(*database, "postgresql://") {
		fmt.Fprintln(stderr, "stet bench: --database must be a postgres:// URL")
		return exitUsage
	}
	switch args[0] {
	case "intake":
		res, err = benchIntake(ctx, scratch, *database, *n, *conc)
	case "pipeline":
		res, err = benchPipeline(ctx, scratch, *database, *n, *conc)
	case "river-drivers":
		res, err = benchRiverDrivers(ctx, *database, *n)
	case "provider-limited":
		docs := *rpm // one minute of the limit, unless -n says otherwise
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "n" {
				docs = *n
			}
		})
		return benchProviderLimited(ctx, stdout, stderr, providerBenchOptions{dir: scratch, database: *database, n: docs,
			binary: *binary, processes: *workerProcs,
			rpm: *rpm, latencyMin: time.Second, latencyMax: 2 * time.Second, concurrency: *provConc}, *asJSON)
	case "batch":
		docs := 10000
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "n" {
				docs = *n
			}
		})
		return benchBatch(ctx, stdout, stderr, scratch, docs, *batchSize, *asJSON)
	case "scaling":
		return benchScaling(ctx, stdout, stderr, scratch, *database, *binary, *processes, *n, *conc, *asJSON)
	default:
		fmt.Fprint(stderr, benchUsage)
		return exitUsage
	}
	if err != nil {
		fmt.Fprintln(stderr, "stet bench:", err)
		return exitFailure
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(res)
		return exitOK
	}
	fmt.Fprintf(stdout, "%s  (%s)\n", res.Name, res.Settings)
	subject := res.Subject
	if subject == "" {
		subject = "stet"
	}
	fmt.Fprintf(stdout, "  %-9s %10.1f %s  (%d in %s)\n", subject, res.Rate, res.Unit, res.Count, res.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(stdout, "  baseline  %10.1f %s  (%s; %d in %s)\n", res.BaselineRate, res.Unit, res.Baseline, res.BaselineCount, res.BaselineElapsed.Round(time.Millisecond))
	fmt.Fprintf(stdout, "  ratio     %10.2f\n", res.Ratio)
	return exitOK
}

type benchResult struct {
	Name            string        `json:"name"`
	Subject         string        `json:"subject,omitempty"` // what was measured, if not stet itself
	Settings        string        `json:"settings"`
	Unit            string        `json:"unit"`
	Count           int           `json:"count"`
	Elapsed         time.Duration `json:"elapsed_ns"`
	Rate            float64       `json:"rate"`
	Baseline        string        `json:"baseline"`
	BaselineCount   int           `json:"baseline_count"`
	BaselineElapsed time.Duration `json:"baseline_elapsed_ns"`
	BaselineRate    float64       `json:"baseline_rate"`
	Ratio           float64       `json:"ratio"`
}

func (r *benchResult) finish() {
	r.Rate = float64(r.Count) / r.Elapsed.Seconds()
	r.BaselineRate = float64(r.BaselineCount) / r.BaselineElapsed.Seconds()
	r.Ratio = r.Rate / r.BaselineRate
}

const sqliteSettings = "SQLite WAL, synchronous=FULL (fsync per commit), busy_timeout 10s, one writer connection"

// dbSettings describes the durability settings a figure was measured under.
func dbSettings(ctx context.Context, db *ledger.DB) string {
	if db.Dialect() != ledger.Postgres {
		return sqliteSettings
	}
	show := func(name string) string {
		var v string
		if err := db.Writer().QueryRowContext(ctx, "SHOW "+name).Scan(&v); err != nil {
			return "?"
		}
		return v
	}
	return fmt.Sprintf("PostgreSQL %s, fsync=%s, synchronous_commit=%s, full_page_writes=%s; pool of %d per process",
		show("server_version"), show("fsync"), show("synchronous_commit"), show("full_page_writes"), ledger.PostgresMaxConns)
}

// benchEnv is a stet wired from a generated config, as `stet serve` wires it.
type benchEnv struct {
	app    *app
	base   string
	secret string
	stop   func()
	fake   *openaifake.Server
}

// writeBenchConfig writes a benchmark config: one source, a small profile,
// an openai processor at fakeURL. It returns the path and the environment
// the config names.
func writeBenchConfig(dir, database, fakeURL string) (string, map[string]string, error) {
	return writeBenchConfigWith(dir, database, fakeURL, "", 16)
}

// writeBenchConfigWith is writeBenchConfig with the processor's limits (a
// YAML flow mapping such as "{rpm: 600, concurrency: 32}", or "") and the
// workers' concurrency.
func writeBenchConfigWith(dir, database, fakeURL, limits string, concurrency int) (string, map[string]string, error) {
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("stet-bench-secret-0123456789abcd"))
	profiles := filepath.Join(dir, "profiles")
	if err := os.MkdirAll(profiles, 0o700); err != nil {
		return "", nil, err
	}
	schema := `{"type":"object","additionalProperties":false,"required":["category","severity"],
 "properties":{"category":{"type":"string","enum":["none","spam","harassment"]},"severity":{"type":"string","enum":["none","low","high"]}}}`
	if err := os.WriteFile(filepath.Join(profiles, "bench.schema.json"), []byte(schema), 0o600); err != nil {
		return "", nil, err
	}
	if err := os.WriteFile(filepath.Join(profiles, "bench.prompt.tmpl"), []byte("Classify this report:\n{{.Text}}\n"), 0o600); err != nil {
		return "", nil, err
	}
	if database == "" {
		database = "sqlite://stet.db"
	}
	cfgText := fmt.Sprintf(`database: %q
listen: 127.0.0.1:0
tenants:
  - id: bench
    tokens: [{name: ops, role: operator, token_env: STET_BENCH_TOKEN}]
sources:
  - {id: bench, tenant: bench, secret_env: STET_BENCH_SECRET, profile: bench, policy: bench}
profiles:
  - {id: bench, version: 1, schema: profiles/bench.schema.json, prompt: profiles/bench.prompt.tmpl}
processors:
  - {id: fake, kind: openai, base_url: %q, api_key_env: STET_BENCH_OPENAI_KEY, model: fake-instant, region: local, retention: none%s}
policies:
  - {id: bench, processors: [fake], minimize: [email, phone]}
workers: {concurrency: %d}
`, database, fakeURL, limitsYAML(limits), concurrency)
	cfgPath := filepath.Join(dir, "stet.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfgText), 0o600); err != nil {
		return "", nil, err
	}
	env := map[string]string{"STET_BENCH_TOKEN": "bench-token", "STET_BENCH_SECRET": secret, "STET_BENCH_OPENAI_KEY": "sk-bench"}
	return cfgPath, env, nil
}

func limitsYAML(limits string) string {
	if limits == "" {
		return ""
	}
	return ", limits: " + limits
}

func startBench(ctx context.Context, dir, database, role string) (*benchEnv, error) {
	fake := openaifake.New(openaifake.Options{})
	cfgPath, env, err := writeBenchConfig(dir, database, fake.URL())
	if err != nil {
		return nil, err
	}
	secret := env["STET_BENCH_SECRET"]
	cfg, err := config.Load(cfgPath, func(k string) string { return env[k] })
	if err != nil {
		return nil, err
	}
	a, err := openApp(ctx, cfg, appOptions{role: role, migrate: true, pollInterval: 20 * time.Millisecond})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		a.close()
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = a.serve(sctx, ln, role); close(done) }()
	b := &benchEnv{app: a, base: "http://" + ln.Addr().String(), secret: secret, fake: fake}
	b.stop = func() { cancel(); <-done; a.close(); fake.Close() }
	return b, nil
}

// parallel runs do(0) … do(n-1) from conc goroutines and returns the
// first error; after an error, no new index is started.
func parallel(n, conc int, do func(i int) error) error {
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for failed.Load() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := do(i); err != nil {
					failed.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	wg.Wait()
	err, _ := failed.Load().(error)
	return err
}

// deliverAll posts n deliveries from conc clients; every fifth is a
// duplicate (an earlier body under a new webhook-id). It returns the job
// IDs of the accepted ones.
func (b *benchEnv) deliverAll(ctx context.Context, n, conc int) ([]string, time.Duration, error) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc}}
	var mu sync.Mutex
	var jobs []string
	start := time.Now()
	err := parallel(n, conc, func(i int) error {
		doc := i
		if i%5 == 4 {
			doc = i - 4 // a duplicate of an earlier document
		}
		body, _ := json.Marshal(map[string]any{"external_id": fmt.Sprintf("doc-%07d", doc), "revision": 1,
			"text": fmt.Sprintf("Benchmark report %d: buy cheap pills now, call 555-123-%04d.", doc, doc%10000)})
		id := fmt.Sprintf("msg_%07d", i)
		now := time.Now()
		sig, err := api.Sign(b.secret, id, now, body)
		if err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.base+"/v1/sources/bench/reports", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("webhook-id", id)
		req.Header.Set("webhook-timestamp", fmt.Sprint(now.Unix()))
		req.Header.Set("webhook-signature", sig)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var out api.IntakeResponse
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			return fmt.Errorf("delivery %d: status %d: %w", i, resp.StatusCode, err)
		}
		switch resp.StatusCode {
		case http.StatusAccepted:
			mu.Lock()
			jobs = append(jobs, out.JobID)
			mu.Unlock()
		case http.StatusOK:
		default:
			return fmt.Errorf("delivery %d: status %d", i, resp.StatusCode)
		}
		return nil
	})
	return jobs, time.Since(start), err
}

func benchIntake(ctx context.Context, dir, pgURL string, n, conc int) (benchResult, error) {
	res := benchResult{Name: "intake", Unit: "deliveries/s", Baseline: "raw INSERT, one row per transaction, same database and pool"}
	database, drop, err := scratchDatabase(ctx, pgURL)
	if err != nil {
		return res, err
	}
	defer drop()
	b, err := startBench(ctx, dir, database, "api")
	if err != nil {
		return res, err
	}
	defer b.stop()
	res.Settings = dbSettings(ctx, b.app.db) + fmt.Sprintf("; %d HTTP clients, 20%% duplicates; workers off", conc)
	jobs, elapsed, err := b.deliverAll(ctx, n, conc)
	if err != nil {
		return res, err
	}
	if want := n - n/5; len(jobs) != want {
		return res, fmt.Errorf("accepted %d deliveries, want %d", len(jobs), want)
	}
	res.Count, res.Elapsed = n, elapsed

	// The baseline: the same number of one-row transactions, from the same
	// number of goroutines, on the same pool and file.
	db := b.app.db.Writer()
	if _, err := db.ExecContext(ctx, `CREATE TABLE bench_raw (id TEXT PRIMARY KEY, body TEXT NOT NULL)`); err != nil {
		return res, err
	}
	start := time.Now()
	err = parallel(n, conc, func(int) error {
		return inTx(ctx, db, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO bench_raw (id, body) VALUES ($1, $2)`, stet.NewID("raw", time.Now()), "Benchmark report body of about the same size as a delivery.")
			return err
		})
	})
	if err != nil {
		return res, err
	}
	res.BaselineCount, res.BaselineElapsed = n, time.Since(start)
	res.finish()
	return res, nil
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

func benchPipeline(ctx context.Context, dir, pgURL string, n, conc int) (benchResult, error) {
	res := benchResult{Name: "pipeline", Unit: "documents/s", Baseline: "River no-op jobs/s, same database, 16 workers"}
	database, drop, err := scratchDatabase(ctx, pgURL)
	if err != nil {
		return res, err
	}
	defer drop()
	b, err := startBench(ctx, filepath.Join(dir, "stet"), database, "all")
	if err != nil {
		return res, err
	}
	res.Settings = dbSettings(ctx, b.app.db) + "; instant fake OpenAI over loopback HTTP; 16 extract workers"
	start := time.Now()
	jobs, _, err := b.deliverAll(ctx, n, conc)
	if err == nil {
		err = waitCommitted(ctx, b.app.db, len(jobs), 10*time.Minute)
	}
	elapsed := time.Since(start)
	b.stop()
	if err != nil {
		return res, err
	}
	res.Count, res.Elapsed = len(jobs), elapsed

	riverDB, dropRiver, err := scratchDatabase(ctx, pgURL)
	if err != nil {
		return res, err
	}
	defer dropRiver()
	if riverDB == "" {
		riverDB = "sqlite://" + filepath.Join(dir, "river", "river.db")
	}
	count, elapsed, err := benchRiverNoop(ctx, riverDB, len(jobs))
	if err != nil {
		return res, err
	}
	res.BaselineCount, res.BaselineElapsed = count, elapsed
	res.finish()
	return res, nil
}

func waitCommitted(ctx context.Context, db *ledger.DB, n int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		counts, err := db.JobCounts(ctx)
		if err != nil {
			return err
		}
		if counts[stet.JobCommitted]+counts[stet.JobManual] >= n {
			if counts[stet.JobManual] > 0 {
				return fmt.Errorf("%d jobs went manual", counts[stet.JobManual])
			}
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("not all %d jobs committed within %s", n, limit)
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

// benchRiverNoop measures River alone on a fresh database with the same
// settings: n no-op jobs inserted one per transaction (as intake does for
// each document) and worked by 16 workers, start to last completion.
func benchRiverNoop(ctx context.Context, database string, n int) (int, time.Duration, error) {
	db, err := ledger.Open(ctx, database)
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	elapsed, err := riverNoop(ctx, pipeline.RiverDriver(db), n)
	return n, elapsed, err
}
