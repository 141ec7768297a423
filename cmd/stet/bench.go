package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/stetlabs/stet/config"
	"github.com/stetlabs/stet/internal/app"
	"github.com/stetlabs/stet/internal/bench"
	"github.com/stetlabs/stet/ledger"
)

const benchUsage = `Usage: stet bench intake|pipeline|provider-limited|batch|memory|import [flags]

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
  memory    RSS and CPU with -n queued documents (default 100000), under a
            dispatch pause and draining, vs River alone with as many no-op jobs;
            and ledger bytes per document besides text, by table
  import    stet import of -n lines (default 1000000) in slices of 100,000:
            lines/s per slice, vs intake's deliveries/s in the same run
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
	window := fs.Duration("window", 10*time.Second, "memory: each measuring window")
	pausedProfile := fs.String("paused-cpuprofile", "", "memory: write a CPU profile of stet's paused window alone to this file")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	encrypt := fs.Bool("encrypt", false, "intake, pipeline: measure encryption at rest (stet with encryption: against stet without, same run)")
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
	if *database != "" && !strings.HasPrefix(*database, "postgres://") && !strings.HasPrefix(*database, "postgresql://") {
		fmt.Fprintln(stderr, "stet bench: --database must be a postgres:// URL")
		return exitUsage
	}
	if *encrypt && args[0] != "intake" && args[0] != "pipeline" {
		fmt.Fprintln(stderr, "stet bench: --encrypt is for intake and pipeline")
		return exitUsage
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	wiring := bench.Stet{Open: openBenchApp, Import: func(ctx context.Context, args []string) error {
		if code := cmdImport(ctx, args, io.Discard, io.Discard); code != exitOK {
			return fmt.Errorf("import exited %d", code)
		}
		return nil
	}}
	var res interface{ WriteText(io.Writer) }
	var err error
	switch args[0] {
	case "intake":
		res, err = bench.Intake(ctx, bench.IntakeOptions{Stet: wiring, Dir: scratch, Database: *database, N: *n, Concurrency: *conc, Encrypt: *encrypt})
	case "pipeline":
		res, err = bench.Pipeline(ctx, bench.PipelineOptions{Stet: wiring, Dir: scratch, Database: *database, N: *n, Concurrency: *conc, Encrypt: *encrypt})
	case "river-drivers":
		res, err = bench.RiverDrivers(ctx, bench.RiverDriversOptions{Database: *database, N: *n})
	case "provider-limited":
		docs := *rpm // one minute of the limit, unless -n says otherwise
		if given["n"] {
			docs = *n
		}
		if *workerProcs > 1 && *database == "" {
			fmt.Fprintln(stderr, "stet bench provider-limited: --worker-processes above 1 needs --database postgres://…")
			return exitUsage
		}
		res, err = bench.ProviderLimited(ctx, bench.ProviderOptions{Stet: wiring, Dir: scratch, Database: *database, N: docs,
			Binary: *binary, Processes: *workerProcs, RPM: *rpm, LatencyMin: time.Second, LatencyMax: 2 * time.Second, Concurrency: *provConc})
	case "memory":
		docs := 100000
		if given["n"] {
			docs = *n
		}
		res, err = bench.Memory(ctx, bench.MemoryOptions{Stet: wiring, Dir: scratch, Database: *database, N: docs, Window: *window, PausedProfile: *pausedProfile})
	case "import":
		lines := 1000000
		if given["n"] {
			lines = *n
		}
		res, err = bench.Import(ctx, bench.ImportOptions{Stet: wiring, Dir: scratch, Database: *database, N: lines, Concurrency: *conc})
	case "batch":
		docs := 10000
		if given["n"] {
			docs = *n
		}
		res, err = bench.Batch(ctx, bench.BatchOptions{Stet: wiring, Dir: scratch, N: docs, BatchSize: *batchSize})
	case "scaling":
		if *database == "" {
			fmt.Fprintln(stderr, "stet bench scaling: needs --database postgres://…")
			return exitUsage
		}
		var counts []int
		for _, c := range strings.Split(*processes, ",") {
			w, err := strconv.Atoi(strings.TrimSpace(c))
			if err != nil || w < 1 {
				fmt.Fprintln(stderr, "stet bench scaling: --processes must be a list of positive integers")
				return exitUsage
			}
			counts = append(counts, w)
		}
		res, err = bench.Scaling(ctx, bench.ScalingOptions{Dir: scratch, Database: *database, Binary: *binary, Processes: counts, N: *n, Concurrency: *conc})
	default:
		fmt.Fprint(stderr, benchUsage)
		return exitUsage
	}
	if err != nil {
		fmt.Fprintf(stderr, "stet bench %s: %v\n", args[0], err)
		return exitFailure
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(res)
		return exitOK
	}
	res.WriteText(stdout)
	return exitOK
}

// benchApp is an app as the benchmarks drive it.
type benchApp struct {
	a    *app.App
	role string
}

func openBenchApp(ctx context.Context, cfg *config.Config, o bench.OpenOptions) (bench.App, error) {
	a, err := app.Open(ctx, cfg, app.Options{Role: o.Role, Migrate: true, PollInterval: o.PollInterval})
	if err != nil {
		return nil, err
	}
	return benchApp{a, o.Role}, nil
}

func (b benchApp) DB() *ledger.DB { return b.a.DB }
func (b benchApp) Serve(ctx context.Context, ln net.Listener) error {
	return b.a.Serve(ctx, ln, b.role)
}
func (b benchApp) Close() { b.a.Close() }
