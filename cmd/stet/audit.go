package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
)

// cmdAudit runs `stet audit verify`: walk the audit log's hash chain and
// report the first broken link (exit 1), or that it is intact (exit 0).
func cmdAudit(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "verify" {
		fmt.Fprintln(stderr, "Usage: stet audit verify [--config F] [--json]")
		return exitUsage
	}
	fs := flag.NewFlagSet("audit verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := configFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args[1:]); err != nil {
		return exitUsage
	}
	db, code := openLedger(ctx, *cfgPath, stderr)
	if db == nil {
		return code
	}
	defer db.Close()
	rep, err := db.VerifyAuditChain(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "stet audit verify:", err)
		return exitUnhealthy
	}
	if *asJSON {
		_ = json.NewEncoder(stdout).Encode(rep)
	} else {
		rep.WriteText(stdout)
	}
	if rep.Broken != nil {
		return exitFailure
	}
	return exitOK
}
