package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/internal/cli"
	"github.com/stetlabs/stet/ledger"
)

// cmdReroute is an operator's boundary decision: it moves the blocked jobs
// of a scope to a processor the policy now in force permits, or with
// --dry-run lists them and changes nothing.
func cmdReroute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("reroute", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: stet reroute --scope job:ID|policy:ID|processor:ID --to PROCESSOR --reason R [--dry-run] [--json]\n\n"+
			"Moves blocked jobs to a processor the policy now in force permits: the decision (you, the\n"+
			"reason, the old and new processor, the policy and its hash) is kept with each job and\n"+
			"audited, and each job runs again on the new processor. --dry-run lists the jobs only.")
		fs.PrintDefaults()
	}
	cfgPath := cli.ConfigFlag(fs)
	scope := fs.String("scope", "", "job:ID, policy:ID (blocked jobs accepted under it) or processor:ID (jobs blocked for it)")
	to := fs.String("to", "", "the processor to move them to")
	reason := fs.String("reason", "", "who approved the processor, and where (required)")
	dryRun := fs.Bool("dry-run", false, "list the jobs and change nothing")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() != 0 || *scope == "" || *to == "" || strings.TrimSpace(*reason) == "" {
		fs.Usage()
		return exitUsage
	}
	a, _, code := cli.OpenOperatorApp(ctx, *cfgPath, "stet reroute", stderr)
	if a == nil {
		return code
	}
	defer a.Close()
	out, err := a.Pipeline.Reroute(ctx, ledger.RerouteParams{Tenant: ledger.AnyTenant, Scope: *scope, To: *to, Reason: *reason,
		Actor: "cli", DryRun: *dryRun})
	if err != nil {
		fmt.Fprintln(stderr, "stet reroute:", stet.ErrorMessageOf(err))
		switch stet.ErrorCodeOf(err) {
		case stet.EInvalid:
			return exitUsage
		case stet.ENotFound, stet.EConflict:
			return exitFailure
		}
		return exitUnhealthy
	}
	if *asJSON {
		cli.WriteJSON(stdout, out)
		return exitOK
	}
	verb := "moved to"
	if out.DryRun {
		verb = "would move to"
	}
	for _, j := range out.Jobs {
		fmt.Fprintf(stdout, "job %s: blocked for %s, %s %s\n", j.JobID, dashed(j.From), verb, out.To)
	}
	fmt.Fprintf(stdout, "%d job(s) %s %s\n", len(out.Jobs), verb, out.To)
	return exitOK
}
