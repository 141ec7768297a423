package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/internal/app"
	"github.com/stetlabs/stet/internal/cli"
	"github.com/stetlabs/stet/ledger"
)

// cmdDelete requests the deletion of one report and prints its tasks. The
// deletion's worker runs in `stet serve`; `stet deletions ID` follows it.
func cmdDelete(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("delete", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: stet delete [flags] SOURCE/EXTERNAL_ID | REPORT_ID\n\nDeletes a report: cancels its unfinished jobs, writes a tombstone and one task per copy, and prints the tasks.")
		fs.PrintDefaults()
	}
	cfgPath := cli.ConfigFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return exitUsage
	}
	a, _, code := cli.OpenOperatorApp(ctx, *cfgPath, "stet delete", stderr)
	if a == nil {
		return code
	}
	defer a.Close()
	req, err := a.DeletionRequest(ctx, fs.Arg(0), "cli", time.Now().UTC())
	if errors.Is(err, app.ErrDeleteTarget) {
		fs.Usage()
		return exitUsage
	}
	if err != nil {
		fmt.Fprintln(stderr, "stet delete:", stet.ErrorMessageOf(err))
		return exitFailure
	}
	out, err := a.Pipeline.Governance().RequestDeletion(ctx, req)
	if err != nil {
		fmt.Fprintln(stderr, "stet delete:", stet.ErrorMessageOf(err))
		if stet.ErrorCodeOf(err) == stet.ENotFound {
			return exitFailure
		}
		return exitUnhealthy
	}
	d, err := a.DB.GetDeletion(ctx, ledger.AnyTenant, out.DeletionID)
	if err != nil {
		fmt.Fprintln(stderr, "stet delete:", stet.ErrorMessageOf(err))
		return exitUnhealthy
	}
	if !out.Created && !*asJSON {
		fmt.Fprintln(stdout, "already deleted:")
	}
	printDeletion(stdout, d, *asJSON)
	return exitOK
}

// cmdDeletions lists deletions, or shows one with its tasks; "stet
// deletions confirm" closes a task stet could not do itself.
func cmdDeletions(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "confirm" {
		return cmdDeletionsConfirm(ctx, args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("deletions", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: stet deletions [flags] [DELETION_ID]\n       stet deletions confirm DELETION_ID COPY --evidence TEXT\n\nLists deletions, newest first, or shows one deletion's tasks.")
		fs.PrintDefaults()
	}
	cfgPath := cli.ConfigFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 1 {
		fs.Usage()
		return exitUsage
	}
	db, code := cli.OpenLedger(ctx, *cfgPath, stderr)
	if db == nil {
		return code
	}
	defer db.Close()
	if fs.NArg() == 1 {
		d, err := db.GetDeletion(ctx, ledger.AnyTenant, fs.Arg(0))
		if err != nil {
			fmt.Fprintln(stderr, "stet deletions:", stet.ErrorMessageOf(err))
			if stet.ErrorCodeOf(err) == stet.ENotFound {
				return exitFailure
			}
			return exitUnhealthy
		}
		if err := db.Audit(ctx, ledger.AuditEntry{Tenant: d.TenantID, Actor: "cli", Action: "deletion.read", ObjectType: "deletion",
			ObjectID: d.ID, Now: time.Now().UTC()}); err != nil {
			fmt.Fprintln(stderr, "stet deletions: the read could not be audited:", err)
			return exitUnhealthy
		}
		printDeletion(stdout, d, *asJSON)
		return exitOK
	}
	ds, err := db.ListDeletions(ctx, ledger.AnyTenant, 100)
	if err != nil {
		fmt.Fprintln(stderr, "stet deletions:", err)
		return exitUnhealthy
	}
	if *asJSON {
		views := []api.DeletionView{}
		for _, d := range ds {
			views = append(views, api.NewDeletionView(d))
		}
		cli.WriteJSON(stdout, map[string]any{"deletions": views})
		return exitOK
	}
	ledger.WriteDeletions(stdout, ds)
	return exitOK
}

func printDeletion(w io.Writer, d *stet.Deletion, asJSON bool) {
	if asJSON {
		cli.WriteJSON(w, api.NewDeletionView(d))
		return
	}
	ledger.WriteDeletion(w, d)
}

// cmdDeletionsConfirm records an operator's evidence that a copy stet could
// not delete itself (a provider's copy without a delete API) is gone: the
// unresolved task becomes done, with the evidence, audited.
func cmdDeletionsConfirm(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("deletions confirm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: stet deletions confirm [flags] DELETION_ID COPY --evidence TEXT\n\n"+
			"Marks an unresolved task of a deletion done, with your evidence that the copy is gone\n"+
			"(a provider's ticket or reference, never document text), and prints the deletion.")
		fs.PrintDefaults()
	}
	cfgPath := cli.ConfigFlag(fs)
	evidence := fs.String("evidence", "", "what shows the copy is gone (required)")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := cli.ParseInterspersed(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) != 2 || strings.TrimSpace(*evidence) == "" {
		fs.Usage()
		return exitUsage
	}
	db, code := cli.OpenLedger(ctx, *cfgPath, stderr)
	if db == nil {
		return code
	}
	defer db.Close()
	d, err := db.ConfirmTask(ctx, ledger.ConfirmParams{Tenant: ledger.AnyTenant, DeletionID: pos[0], Copy: pos[1],
		Actor: "cli", Evidence: *evidence, Now: time.Now().UTC()})
	if err != nil {
		fmt.Fprintln(stderr, "stet deletions confirm:", stet.ErrorMessageOf(err))
		switch stet.ErrorCodeOf(err) {
		case stet.ENotFound, stet.EConflict:
			return exitFailure
		case stet.EInvalid:
			return exitUsage
		}
		return exitUnhealthy
	}
	printDeletion(stdout, d, *asJSON)
	return exitOK
}
