package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/internal/batchlookup"
	"github.com/stetlabs/stet/internal/cli"
	"github.com/stetlabs/stet/ledger"
)

const batchUsage = `Usage: stet batch status|list|reconcile [flags]

  status ID      one status lookup of an existing batch (stet's batch ID or
                 the provider's); see 'stet batch status -h'
  list           the ledger's batches: state, items applied, next poll time
  reconcile ID   record an operator's decision about an unknown batch:
                 --adopt PROVIDER_BATCH_ID or --resubmit
`

func cmdBatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, batchUsage)
		return exitUsage
	}
	switch args[0] {
	case "status":
		return cmdBatchStatus(ctx, args[1:], stdout, stderr)
	case "list":
		return cmdBatchList(ctx, args[1:], stdout, stderr)
	case "reconcile":
		return cmdBatchReconcile(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, batchUsage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "stet batch: unknown subcommand %q\n\n%s", args[0], batchUsage)
		return exitUsage
	}
}

const batchStatusHelp = `Usage: stet batch status [flags] ID

Performs ONE status lookup of an existing provider batch and prints it.
ID is stet's batch ID (bat_…) or the provider's batch ID; a provider ID
stet's ledger does not know needs --processor.

It never submits a batch, never cancels one, and never sends document
text: it sends one GET with the processor's key. A 429 is retried at most
three attempts in all, waiting Retry-After (seconds or an HTTP-date) when
that is longer than the exponential delay (1 s, 2 s). Each request times
out after 20 s, redirects are refused, and the answer is read up to 1 MiB.
An unsuccessful lookup is not a reason to submit again.

Exit status: 0 the status was printed; 1 the lookup failed (after its
retries); 2 bad flags, config or ID; 3 the ledger is unreachable.

Flags:
`

func cmdBatchStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("batch status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, batchStatusHelp); fs.PrintDefaults() }
	cfgPath := cli.ConfigFlag(fs)
	asJSON := fs.Bool("json", false, "print the provider's answer as JSON, indented")
	procID := fs.String("processor", "", "the processor of a provider batch ID the ledger does not know")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return exitUsage
	}
	id := fs.Arg(0)
	cfg, ok := cli.LoadOperatorConfig(*cfgPath, stderr)
	if !ok {
		return exitUsage
	}
	providerID, processorID := id, *procID
	if processorID == "" || strings.HasPrefix(id, "bat_") {
		if !cli.LedgerExists(cfg.Database, stderr) {
			return exitUnhealthy
		}
		db, code := cli.OpenLedger(ctx, *cfgPath, stderr)
		if db == nil {
			return code
		}
		var err error
		providerID, processorID, err = batchlookup.FromLedger(ctx, db, id)
		db.Close()
		switch {
		case stet.ErrorCodeOf(err) == stet.ENotFound:
			fmt.Fprintln(stderr, "stet batch status: no batch with this ID in the ledger; for a provider batch ID, name its --processor")
			return exitUsage
		case errors.Is(err, batchlookup.ErrNoProviderBatch):
			fmt.Fprintln(stderr, "stet batch status:", err)
			return exitFailure
		case err != nil:
			fmt.Fprintln(stderr, "stet batch status:", err)
			return exitUnhealthy
		}
	}
	bp, err := batchlookup.Client(cfg, processorID, os.Getenv)
	if err != nil {
		fmt.Fprintln(stderr, "stet batch status:", err)
		return exitUsage
	}
	st, err := batchlookup.Lookup(ctx, bp, providerID, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "stet batch status:", err)
		return exitFailure
	}
	batchlookup.WriteText(stdout, processorID, st, *asJSON)
	return exitOK
}

func cmdBatchList(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("batch list", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := cli.ConfigFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	state := fs.String("state", "", "only batches in this state (intent, submitted, in_progress, completed, failed, expired, cancelled, unknown)")
	limit := fs.Int("limit", 100, "at most this many batches, newest first")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	var states []stet.BatchState
	if *state != "" {
		s := stet.BatchState(*state)
		if !s.Valid() {
			fmt.Fprintf(stderr, "stet batch list: unknown state %q\n", *state)
			return exitUsage
		}
		states = append(states, s)
	}
	cfg, ok := cli.LoadOperatorConfig(*cfgPath, stderr)
	if !ok {
		return exitUsage
	}
	if !cli.LedgerExists(cfg.Database, stderr) {
		return exitUnhealthy
	}
	db, code := cli.OpenLedger(ctx, *cfgPath, stderr)
	if db == nil {
		return code
	}
	defer db.Close()
	bs, err := ledger.ListBatches(ctx, db.Reader(), states, *limit)
	if err != nil {
		fmt.Fprintln(stderr, "stet batch list:", err)
		return exitUnhealthy
	}
	if *asJSON {
		if bs == nil {
			bs = []*ledger.Batch{}
		}
		cli.WriteJSON(stdout, map[string]any{"batches": bs})
		return exitOK
	}
	ledger.WriteBatches(stdout, bs)
	return exitOK
}

func cmdBatchReconcile(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("batch reconcile", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := cli.ConfigFlag(fs)
	adopt := fs.String("adopt", "", "the provider batch ID that this batch's submission created")
	resubmit := fs.Bool("resubmit", false, "the submission created nothing at the provider: submit it again")
	actor := fs.String("actor", "", "who decides (recorded in the audit log); default $USER")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() != 1 || (*adopt == "") == !*resubmit {
		fmt.Fprintln(stderr, "Usage: stet batch reconcile [flags] BATCH_ID (--adopt PROVIDER_BATCH_ID | --resubmit)")
		return exitUsage
	}
	a, _, code := cli.OpenOperatorApp(ctx, *cfgPath, "stet batch reconcile", stderr)
	if a == nil {
		return code
	}
	defer a.Close()
	who := *actor
	if who == "" {
		who = "cli:" + cmp.Or(os.Getenv("USER"), "operator")
	}
	if err := a.Pipeline.ReconcileBatch(ctx, fs.Arg(0), *adopt, *resubmit, who); err != nil {
		fmt.Fprintln(stderr, "stet batch reconcile:", stet.ErrorMessageOf(err))
		return exitFailure
	}
	if *adopt != "" {
		fmt.Fprintf(stdout, "batch %s: adopted the provider's batch; polling resumes\n", fs.Arg(0))
	} else {
		fmt.Fprintf(stdout, "batch %s: will be submitted again\n", fs.Arg(0))
	}
	return exitOK
}
