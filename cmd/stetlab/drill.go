package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/stetlabs/stet/internal/cli"
	"github.com/stetlabs/stet/lab/drill"
	"github.com/stetlabs/stet/lab/drill/recovery"
)

const drillUsage = `Usage: stetlab drill [NAME…] [--json]
       stetlab drill chaos [flags]

  NAME…   the recovery drills of docs/design.md §10 that need no external service
          (1 2 3 4 5 8 9 10 11 12; all of them when none is named), each on a
          scratch SQLite ledger of its own with River, the API and the fake
          OpenAI provider, in this process. Prints the outcome table (drill,
          expectation, observed reports, jobs, records and provider calls,
          duration, ok); --json prints the outcomes as JSON. Exit 1 if any
          drill fails. The tests run the same drills (lab/drill/recovery).
          Drills 6 and 7 (SIGKILLs of the real binary) run as tests of
          cmd/stet; drill 13 needs destinations.

  chaos   a Jepsen-style drill against a scratch PostgreSQL cluster of its own:
          one api and several worker processes of this binary take a seeded
          load of signed deliveries while workers are SIGKILLed at random and
          the database is restarted once (-m immediate). After a heal phase a
          checker reads the ledger and the fake provider's call log and counts
          lost, duplicated and extra work. Exit 0 only if every count is zero.

Run 'stetlab drill chaos -h' for its flags; docs/drills.md explains the tables.
`

func cmdDrill(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "chaos" {
		return cmdDrillChaos(ctx, args[1:], stdout, stderr)
	}
	asJSON := false
	var names []string
	for _, a := range args {
		switch a {
		case "--json", "-json":
			asJSON = true
		case "help", "-h", "--help":
			fmt.Fprint(stdout, drillUsage)
			return exitOK
		default:
			if strings.HasPrefix(a, "-") {
				fmt.Fprintf(stderr, "stetlab drill: unknown flag %q\n\n%s", a, drillUsage)
				return exitUsage
			}
			names = append(names, a)
		}
	}
	drills, err := recovery.Lookup(names)
	if err != nil {
		fmt.Fprintf(stderr, "stetlab drill: %v\n", err)
		return exitUsage
	}
	rep, err := recovery.RunAll(ctx, drills, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "stetlab drill: interrupted")
		return exitFailure
	}
	if asJSON {
		cli.WriteJSON(stdout, rep)
	} else {
		rep.WriteText(stdout)
	}
	if !rep.OK {
		return exitFailure
	}
	return exitOK
}

func cmdDrillChaos(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("drill chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o drill.Options
	fs.IntVar(&o.Reports, "reports", 2000, "distinct reports to deliver (each 2–10 times)")
	fs.IntVar(&o.Kills, "kills", 10, "worker SIGKILLs during the load (at least)")
	seed := fs.String("seed", "", "seed of every random choice (default: time-based; always printed)")
	fs.IntVar(&o.Workers, "workers", 2, "worker processes")
	fs.Float64Var(&o.FaultRate, "fault-rate", 0.1, "share of provider calls answered 429, 500 or 503")
	fs.StringVar(&o.PGBin, "pgbin", "/usr/lib/postgresql/15/bin", "folder of PostgreSQL's initdb and pg_ctl")
	fs.BoolVar(&o.Keep, "keep", false, "keep the scratch folder (cluster data, process logs)")
	fs.BoolVar(&o.Destination, "destination", false, "point the source at a receiver and count lost record events (docs/design.md §13)")
	fs.Float64Var(&o.DestFaultRate, "dest-fault-rate", 0.2, "with --destination: share of POSTs the receiver answers 500")
	fs.BoolVar(&o.BatchFaults, "batch-faults", false, "send every third report to a batch-mode source and crash every worker at after_batch_submit, then mid_apply; count batches created twice")
	fs.DurationVar(&o.ResumeBound, "resume-bound", drill.DefaultResumeBound, "fail when a dead worker's extract or commit job waits longer than this for a live one")
	fs.DurationVar(&o.BatchResumeBound, "batch-resume-bound", drill.DefaultBatchResumeBound, "the same bound for a dead worker's batch jobs")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	fs.StringVar(&o.Binary, "stet-binary", "", "the stet binary to start (default: beside stetlab, on the PATH, or built)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: stetlab drill chaos [flags]")
		fs.VisitAll(func(f *flag.Flag) {
			if f.Usage == "" {
				return // hidden
			}
			fmt.Fprintf(stderr, "  --%s\t%s (default %q)\n", f.Name, f.Usage, f.DefValue)
		})
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "stetlab drill chaos: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if err := o.Check(); err != nil {
		fmt.Fprintln(stderr, "stetlab drill chaos:", err)
		return exitUsage
	}
	if *seed == "" {
		o.Seed = time.Now().UnixNano() % 1_000_000_000
	} else {
		n, err := strconv.ParseInt(*seed, 10, 64)
		if err != nil {
			fmt.Fprintln(stderr, "stetlab drill chaos: --seed must be an integer")
			return exitUsage
		}
		o.Seed = n
	}
	if err := drill.CheckPGBin(o.PGBin); err != nil {
		fmt.Fprintln(stderr, "stetlab drill chaos:", err)
		return exitUnhealthy
	}
	tmp, err := os.MkdirTemp("", "stetlab-bin-")
	if err != nil {
		fmt.Fprintln(stderr, "stetlab drill chaos:", err)
		return exitUnhealthy
	}
	defer os.RemoveAll(tmp)
	if o.Binary, err = stetBinary(o.Binary, tmp, stderr); err != nil {
		fmt.Fprintln(stderr, "stetlab drill chaos:", err)
		return exitUnhealthy
	}
	o.Progress = stderr
	res, err := drill.Run(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "stetlab drill chaos: %v\nseed %d; replay: %s --keep\n", err, o.Seed, o.Replay())
		var se *drill.SetupError
		if errors.As(err, &se) {
			return exitUnhealthy
		}
		return exitFailure
	}
	if *asJSON {
		cli.WriteJSON(stdout, res)
	} else {
		res.WriteText(stdout, o)
	}
	if !res.Pass {
		return exitFailure
	}
	return exitOK
}
