package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/stetlabs/stet/internal/cli"
	"github.com/stetlabs/stet/ledger"
)

const destinationsUsage = `usage: stet destinations list [--json]
       stet destinations enable SOURCE DESTINATION   (clear a 410's disable; re-send what it held)
       stet destinations retry SOURCE DESTINATION    (re-send deliveries failed past max_age)
`

func cmdDestinations(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("destinations", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := cli.ConfigFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON (list)")
	if len(args) == 0 {
		fmt.Fprint(stderr, destinationsUsage)
		return exitUsage
	}
	sub := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		return exitUsage
	}
	db, code := cli.OpenLedger(ctx, *cfgPath, stderr)
	if db == nil {
		return code
	}
	defer db.Close()
	switch sub {
	case "list":
		ds, err := db.Destinations(ctx)
		if err != nil {
			fmt.Fprintln(stderr, "stet destinations:", err)
			return exitUnhealthy
		}
		if *asJSON {
			if ds == nil {
				ds = []ledger.DestinationState{}
			}
			cli.WriteJSON(stdout, ds)
			return exitOK
		}
		ledger.WriteDestinations(stdout, ds)
		return exitOK
	case "enable", "retry":
		if fs.NArg() != 2 {
			fmt.Fprint(stderr, destinationsUsage)
			return exitUsage
		}
		do := db.EnableDestination
		if sub == "retry" {
			do = db.RetryFailedDeliveries
		}
		n, err := do(ctx, fs.Arg(0), fs.Arg(1), "cli", time.Now().UTC())
		if err != nil {
			fmt.Fprintln(stderr, "stet destinations:", err)
			return exitFailure
		}
		fmt.Fprintf(stdout, "%s/%s: %d deliveries queued again\n", fs.Arg(0), fs.Arg(1), n)
		return exitOK
	default:
		fmt.Fprint(stderr, destinationsUsage)
		return exitUsage
	}
}
