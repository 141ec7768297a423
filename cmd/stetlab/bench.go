package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/stetlabs/stet/config"
	"github.com/stetlabs/stet/internal/app"
	"github.com/stetlabs/stet/internal/cli"
	"github.com/stetlabs/stet/lab/bench"
	"github.com/stetlabs/stet/ledger"
)

const benchUsage = `Usage: stetlab bench intake|pipeline|provider-limited|batch|memory|import [flags]

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
	var p bench.Params
	fs.IntVar(&p.N, "n", 5000, "deliveries (intake), documents (pipeline); provider-limited: default one minute of --rpm; batch: default 10000")
	fs.IntVar(&p.Concurrency, "concurrency", 32, "concurrent HTTP clients")
	dir := fs.String("dir", "", "scratch folder (default: a new temporary folder, removed after)")
	fs.StringVar(&p.Database, "database", "", "run on this PostgreSQL server (postgres://…; a scratch schema is created and dropped) instead of a scratch SQLite file")
	fs.StringVar(&p.Processes, "processes", "1,2,4", "scaling: the worker process counts to measure")
	fs.StringVar(&p.Binary, "stet-binary", "", "scaling, provider-limited with --worker-processes above 1: the stet binary to start (default: beside stetlab, on the PATH, or built)")
	fs.IntVar(&p.WorkerProcesses, "worker-processes", 1, "provider-limited: stet worker processes sharing the limit (above 1 needs --database)")
	fs.IntVar(&p.RPM, "rpm", 600, "provider-limited: the requests-per-minute limit the fake enforces and stet is configured with")
	fs.IntVar(&p.ProviderConcurrency, "provider-concurrency", 32, "provider-limited: calls in flight (stet's limits.concurrency and workers; the naive loop's goroutines)")
	asJSON := fs.Bool("json", false, "print JSON")
	fs.IntVar(&p.BatchSize, "batch-size", 2500, "batch: the processor's batch max_items")
	fs.DurationVar(&p.Window, "window", 10*time.Second, "memory: each measuring window")
	fs.StringVar(&p.PausedProfile, "paused-cpuprofile", "", "memory: write a CPU profile of stet's paused window alone to this file")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	memProfile := fs.String("memprofile", "", "write an allocation profile of the whole run to this file when it ends")
	fs.BoolVar(&p.Encrypt, "encrypt", false, "intake, pipeline: measure encryption at rest (stet with encryption: against stet without, same run)")
	if err := fs.Parse(args[1:]); err != nil {
		return exitUsage
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "stetlab bench:", err)
			return exitFailure
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "stetlab bench:", err)
			return exitFailure
		}
		defer pprof.StopCPUProfile()
	}
	if *memProfile != "" {
		defer func() {
			if err := writeAllocProfile(*memProfile); err != nil {
				fmt.Fprintln(stderr, "stetlab bench:", err)
			}
		}()
	}
	p.Dir = *dir
	if p.Dir == "" {
		d, err := os.MkdirTemp("", "stet-bench-")
		if err != nil {
			fmt.Fprintln(stderr, "stetlab bench:", err)
			return exitFailure
		}
		defer os.RemoveAll(d)
		p.Dir = d
	}
	if args[0] == "scaling" || (args[0] == "provider-limited" && p.WorkerProcesses > 1) {
		bin, err := stetBinary(p.Binary, p.Dir, stderr)
		if err != nil {
			fmt.Fprintln(stderr, "stetlab bench:", err)
			return exitUnhealthy
		}
		p.Binary = bin
	}
	p.Given = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { p.Given[f.Name] = true })
	p.Stet = bench.Stet{Open: openBenchApp, Import: func(ctx context.Context, args []string) error {
		if code := cli.Import(ctx, args, io.Discard, io.Discard); code != exitOK {
			return fmt.Errorf("import exited %d", code)
		}
		return nil
	}}
	res, err := bench.Run(ctx, args[0], p)
	var ue *bench.UsageError
	switch {
	case errors.Is(err, bench.ErrUnknown):
		fmt.Fprint(stderr, benchUsage)
		return exitUsage
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "%s: %s\n", strings.TrimSpace("stetlab bench "+ue.Bench), ue.Msg)
		return exitUsage
	case err != nil:
		fmt.Fprintf(stderr, "stetlab bench %s: %v\n", args[0], err)
		return exitFailure
	}
	if *asJSON {
		cli.WriteJSON(stdout, res)
		return exitOK
	}
	res.WriteText(stdout)
	return exitOK
}

// writeAllocProfile writes the allocations sampled since the process
// started (pprof's allocs profile: alloc_space and alloc_objects).
func writeAllocProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
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
