package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/internal/cli"
	"github.com/stetlabs/stet/ledger"
)

func cmdManual(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("manual", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := cli.ConfigFlag(fs)
	scope := fs.String("scope", "", "all, processor:ID or tenant:ID (required)")
	reason := fs.String("reason", "", "why (recorded in the audit log)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() != 0 || !ledger.ValidScope(*scope) {
		fmt.Fprintln(stderr, "Usage: stet manual --scope all|processor:ID|tenant:ID [--reason R] [--json]")
		return exitUsage
	}
	a, _, code := cli.OpenOperatorApp(ctx, *cfgPath, "stet manual", stderr)
	if a == nil {
		return code
	}
	defer a.Close()
	n, err := a.Pipeline.Manual(ctx, ledger.ManualParams{Scope: *scope, Reason: *reason, Actor: "cli", AuditTenant: "*", Route: "stet manual"})
	if err != nil {
		fmt.Fprintf(stderr, "stet manual: %s (%d converted before it stopped; run it again for the rest)\n", stet.ErrorMessageOf(err), n)
		return exitFailure
	}
	if *asJSON {
		_ = json.NewEncoder(stdout).Encode(map[string]any{"scope": *scope, "converted": n})
		return exitOK
	}
	fmt.Fprintf(stdout, "%s: %d waiting or blocked jobs turned into manual review records\n", *scope, n)
	return exitOK
}
