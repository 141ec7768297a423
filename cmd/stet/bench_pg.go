package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/stetlabs/stet/config"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// scratchDatabase returns a URL for a fresh schema on the PostgreSQL server
// at base, and a function that drops it. With base "" it returns "" (the
// caller uses a scratch SQLite file).
func scratchDatabase(ctx context.Context, base string) (string, func(), error) {
	if base == "" {
		return "", func() {}, nil
	}
	var b [5]byte
	_, _ = rand.Read(b[:])
	schema := "bench_" + hex.EncodeToString(b[:])
	admin, err := sql.Open("pgx", base)
	if err != nil {
		return "", nil, err
	}
	if _, err := admin.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
		admin.Close()
		return "", nil, fmt.Errorf("create scratch schema: %w", err)
	}
	u, err := url.Parse(base)
	if err != nil {
		admin.Close()
		return "", nil, fmt.Errorf("database URL does not parse")
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), func() {
		_, _ = admin.ExecContext(context.WithoutCancel(ctx), `DROP SCHEMA `+schema+` CASCADE`)
		admin.Close()
	}, nil
}

// benchRiverDrivers measures River's two PostgreSQL drivers on the same
// server: no-op jobs/s with riverdatabasesql (what stet uses: the ledger and
// River share each database/sql transaction) against riverpgxv5 (pgx's own
// pool, which stet's database/sql ledger could not share a transaction with).
func benchRiverDrivers(ctx context.Context, base string, n int) (benchResult, error) {
	res := benchResult{Name: "river-drivers", Subject: "riverdatabasesql (what stet uses)", Unit: "no-op jobs/s",
		Baseline: "riverpgxv5 (pgxpool), same server, 16 workers, one insert per transaction"}
	if base == "" {
		return res, fmt.Errorf("river-drivers needs --database postgres://…")
	}
	run := func(driver string) (time.Duration, string, error) {
		database, drop, err := scratchDatabase(ctx, base)
		if err != nil {
			return 0, "", err
		}
		defer drop()
		db, err := ledger.Open(ctx, database)
		if err != nil {
			return 0, "", err
		}
		defer db.Close()
		settings := dbSettings(ctx, db)
		var elapsed time.Duration
		switch driver {
		case "databasesql":
			elapsed, err = riverNoop(ctx, riverdatabasesql.New(db.Writer()), n)
		case "pgxv5":
			pool, perr := pgxpool.New(ctx, database)
			if perr != nil {
				return 0, "", perr
			}
			defer pool.Close()
			elapsed, err = riverNoop(ctx, riverpgxv5.New(pool), n)
		}
		return elapsed, settings, err
	}
	var err error
	if res.Elapsed, res.Settings, err = run("databasesql"); err != nil {
		return res, err
	}
	if res.BaselineElapsed, _, err = run("pgxv5"); err != nil {
		return res, err
	}
	res.Count, res.BaselineCount = n, n
	res.finish()
	return res, nil
}

// riverNoop migrates River with driver, inserts n no-op jobs one per
// transaction, works them with 16 workers, and times first insert to last
// completion.
func riverNoop[TTx any](ctx context.Context, driver riverdriver.Driver[TTx], n int) (time.Duration, error) {
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

type scalingRow struct {
	Workers   int           `json:"worker_processes"`
	Documents int           `json:"documents"`
	Elapsed   time.Duration `json:"elapsed_ns"`
	Rate      float64       `json:"documents_per_s"`
	Speedup   float64       `json:"speedup_vs_1"`
}

// benchScaling starts one api process and N worker processes of the real
// binary on one PostgreSQL database, delivers n documents through the api
// process and measures documents/s to committed, for each N.
func benchScaling(ctx context.Context, stdout, stderr io.Writer, dir, base, binary, counts string, n, conc int, asJSON bool) int {
	if base == "" {
		fmt.Fprintln(stderr, "stet bench scaling: needs --database postgres://…")
		return exitUsage
	}
	if binary == "" {
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintln(stderr, "stet bench scaling:", err)
			return exitFailure
		}
		binary = exe
	}
	var rows []scalingRow
	var settings string
	for _, c := range strings.Split(counts, ",") {
		w, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || w < 1 {
			fmt.Fprintln(stderr, "stet bench scaling: --processes must be a list of positive integers")
			return exitUsage
		}
		row, s, err := scaleOnce(ctx, filepath.Join(dir, fmt.Sprintf("scale-%d", w)), base, binary, w, n, conc)
		if err != nil {
			fmt.Fprintf(stderr, "stet bench scaling: %d workers: %v\n", w, err)
			return exitFailure
		}
		settings = s
		if len(rows) > 0 {
			row.Speedup = row.Rate / rows[0].Rate
		} else {
			row.Speedup = 1
		}
		rows = append(rows, row)
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(map[string]any{"name": "scaling", "settings": settings, "rows": rows})
		return exitOK
	}
	fmt.Fprintf(stdout, "scaling  (%s; 1 api process, instant fake OpenAI, workers.concurrency 16 per process)\n", settings)
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  worker processes\tdocuments\telapsed\tdocuments/s\tspeedup vs 1")
	for _, r := range rows {
		fmt.Fprintf(tw, "  %d\t%d\t%s\t%.1f\t%.2f\n", r.Workers, r.Documents, r.Elapsed.Round(time.Millisecond), r.Rate, r.Speedup)
	}
	tw.Flush()
	return exitOK
}

func scaleOnce(ctx context.Context, dir, base, binary string, workers, n, conc int) (scalingRow, string, error) {
	row := scalingRow{Workers: workers}
	fake := openaifake.New(openaifake.Options{})
	defer fake.Close()
	run, err := startProcesses(ctx, dir, base, binary, workers, fake, "", 16)
	if err != nil {
		return row, "", err
	}
	defer run.stop()
	t0 := time.Now()
	jobs, _, err := run.bench.deliverAll(ctx, n, conc)
	if err == nil {
		err = waitCommitted(ctx, run.db, len(jobs), 10*time.Minute)
	}
	if err != nil {
		return row, "", err
	}
	row.Documents, row.Elapsed = len(jobs), time.Since(t0)
	row.Rate = float64(row.Documents) / row.Elapsed.Seconds()
	return row, run.settings, nil
}

// processRun is one api process and N worker processes of the real binary
// on a scratch schema, with a fake provider on a loopback listener.
type processRun struct {
	db       *ledger.DB
	bench    *benchEnv
	settings string
	stop     func()
}

func startProcesses(ctx context.Context, dir, base, binary string, workers int, fake *openaifake.Server, limits string, concurrency int) (_ *processRun, err error) {
	var cleanups []func()
	stop := func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	database, drop, err := scratchDatabase(ctx, base)
	if err != nil {
		return nil, err
	}
	cleanups = append(cleanups, drop)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// The fake listens on a real port so other processes reach it.
	fln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	fsrv := &http.Server{Handler: fake.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go fsrv.Serve(fln)
	cleanups = append(cleanups, func() { fsrv.Close() })

	cfgPath, env, err := writeBenchConfigWith(dir, database, "http://"+fln.Addr().String()+"/v1", limits, concurrency)
	if err != nil {
		return nil, err
	}
	cfg, err := config.Load(cfgPath, func(k string) string { return env[k] })
	if err != nil {
		return nil, err
	}
	db, err := ledger.Open(ctx, cfg.Database)
	if err != nil {
		return nil, err
	}
	cleanups = append(cleanups, func() { db.Close() })
	if err := migrateAll(ctx, db); err != nil {
		return nil, err
	}
	var procs []*exec.Cmd
	cleanups = append(cleanups, func() {
		for _, p := range procs {
			_ = p.Process.Signal(syscall.SIGTERM)
		}
		for _, p := range procs {
			_ = p.Wait()
		}
	})
	start := func(role, listen string) error {
		cmd := exec.CommandContext(ctx, binary, "serve", "--config", cfgPath, "--role", role, "--listen", listen, "--log-level", "warn")
		cmd.Env = os.Environ()
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.log", role, len(procs))))
		if err != nil {
			return err
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			return err
		}
		procs = append(procs, cmd)
		return nil
	}
	apiAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	if err := start("api", apiAddr); err != nil {
		return nil, err
	}
	for i := 0; i < workers; i++ {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		if err := start("worker", addr); err != nil {
			return nil, err
		}
	}
	if err := waitReady(ctx, "http://"+apiAddr, 30*time.Second); err != nil {
		return nil, err
	}
	return &processRun{db: db, bench: &benchEnv{base: "http://" + apiAddr, secret: env["STET_BENCH_SECRET"]},
		settings: dbSettings(ctx, db), stop: stop}, nil
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func waitReady(ctx context.Context, base string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after %s", base, limit)
}
