package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/stetlabs/stet/config"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/pipeline"
)

// destinations are the config's outbound webhooks, the alert webhook
// included, as the pipeline takes them.
func destinations(cfg *config.Config) []pipeline.Destination {
	var out []pipeline.Destination
	for _, s := range cfg.Sources {
		for _, d := range s.Destinations {
			out = append(out, pipeline.Destination{SourceID: s.ID, ID: d.ID, URL: d.URL, Secret: d.Secret,
				Events: d.Events, MaxAge: d.MaxAge.Std()})
		}
	}
	if w := cfg.Alerts.Webhook; w.URL != "" {
		out = append(out, pipeline.Destination{SourceID: ledger.AlertSource, ID: ledger.AlertDestination, URL: w.URL,
			Secret: w.Secret, MaxAge: config.DefaultMaxAge.Std()})
	}
	return out
}

const destinationsUsage = `usage: stet destinations list [--json]
       stet destinations enable SOURCE DESTINATION   (clear a 410's disable; re-send what it held)
       stet destinations retry SOURCE DESTINATION    (re-send deliveries failed past max_age)
`

func cmdDestinations(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("destinations", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := configFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON (list)")
	if len(args) == 0 {
		fmt.Fprint(stderr, destinationsUsage)
		return exitUsage
	}
	sub := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		return exitUsage
	}
	db, code := openLedger(ctx, *cfgPath, stderr)
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
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			_ = enc.Encode(ds)
			return exitOK
		}
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "source\tdestination\tstate\tpending\tdelivered\tfailed\tdisabled\tfailures")
		for _, d := range ds {
			state := "enabled"
			switch {
			case !d.Configured:
				state = "not configured"
			case !d.DisabledAt.IsZero():
				state = fmt.Sprintf("disabled (%d)", d.DisabledStatus)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\n", d.SourceID, d.DestinationID, state, d.Counts[ledger.DeliveryPending],
				d.Counts[ledger.DeliveryDelivered], d.Counts[ledger.DeliveryFailed], d.Counts[ledger.DeliveryDisabled], d.Failures)
		}
		tw.Flush()
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

// printDeliveries lists a job's outbound deliveries for stet inspect.
func printDeliveries(w io.Writer, ds []ledger.Delivery) {
	if len(ds) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  destination\tevent\tsequence\tstate\tattempts\tlast status\twebhook id")
	for _, d := range ds {
		last := dash(itoa(d.LastStatus))
		if d.LastStatus == 0 && d.LastError != "" {
			last = d.LastError
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%d\t%s\t%s\n", d.DestinationID, d.Event, d.Sequence, d.State, d.Attempts, last, d.WebhookID)
	}
	tw.Flush()
}
