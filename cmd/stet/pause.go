package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/internal/cli"
	"github.com/stetlabs/stet/ledger"
)

func cmdPause(ctx context.Context, args []string, stdout, stderr io.Writer, resume bool) int {
	name := "pause"
	if resume {
		name = "unpause"
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := cli.ConfigFlag(fs)
	scopeHelp, reasonHelp := "all, processor:ID or tenant:ID (no --scope: list the pauses in force)", "why (required; recorded in the ledger and the audit log)"
	if resume {
		scopeHelp, reasonHelp = "all, processor:ID or tenant:ID: the pause to clear", "not used: the audit log records who resumed the scope and when"
	}
	scope := fs.String("scope", "", scopeHelp)
	reason := fs.String("reason", "", reasonHelp)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	db, code := cli.OpenLedger(ctx, *cfgPath, stderr)
	if db == nil {
		return code
	}
	defer db.Close()
	now := time.Now().UTC()
	switch {
	case *scope == "" && !resume:
		pauses, err := db.Pauses(ctx)
		if err != nil {
			fmt.Fprintln(stderr, "stet pause:", err)
			return exitUnhealthy
		}
		if *asJSON {
			if pauses == nil {
				pauses = []ledger.Pause{}
			}
			_ = json.NewEncoder(stdout).Encode(map[string]any{"pauses": pauses})
			return exitOK
		}
		ledger.WritePauses(stdout, pauses)
		return exitOK
	case !ledger.ValidScope(*scope):
		fmt.Fprintf(stderr, "stet %s: --scope must be all, processor:ID or tenant:ID\n", name)
		return exitUsage
	case resume:
		if err := db.ClearPause(ctx, *scope, "cli", "*", now); err != nil {
			fmt.Fprintf(stderr, "stet unpause: %s\n", stet.ErrorMessageOf(err))
			return exitFailure
		}
		fmt.Fprintf(stdout, "dispatch resumed for %s; waiting jobs continue from their last durable stage\n", *scope)
		return exitOK
	default:
		if strings.TrimSpace(*reason) == "" {
			fmt.Fprintln(stderr, "stet pause: --reason is required")
			return exitUsage
		}
		if err := db.SetPause(ctx, ledger.Pause{Scope: *scope, Reason: *reason, PausedBy: "cli", PausedAt: now}, "*"); err != nil {
			fmt.Fprintln(stderr, "stet pause:", stet.ErrorMessageOf(err))
			return exitFailure
		}
		fmt.Fprintf(stdout, "dispatch paused for %s; jobs wait without spending attempts until 'stet unpause --scope %s'\n", *scope, *scope)
		return exitOK
	}
}
