package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/internal/cli"
	"github.com/stetlabs/stet/ledger"
)

const auditUsage = `Usage: stet audit verify [--config F] [--json]
       stet audit list [--config F] [--object ID] [--since T] [--json]`

// cmdAudit runs `stet audit verify` and `stet audit list`.
func cmdAudit(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "verify":
			return cmdAuditVerify(ctx, args[1:], stdout, stderr)
		case "list":
			return cmdAuditList(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintln(stderr, auditUsage)
	return exitUsage
}

// cmdAuditVerify walks the audit log's hash chain and reports the first
// broken link (exit 1), or that it is intact (exit 0).
func cmdAuditVerify(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("audit verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := cli.ConfigFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	db, code := cli.OpenLedger(ctx, *cfgPath, stderr)
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

// cmdAuditList prints the audit log of every tenant in chain order, the
// rows GET /v1/audit answers an admin: a table, or with --json the same
// {"rows":[…],"next_cursor":null} document. Like every CLI read it acts as
// an admin would, and is itself audited (actor cli), before anything is
// printed.
func cmdAuditList(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("audit list", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: stet audit list [flags]\n\nPrints the audit log of every tenant, oldest first: IDs only, never text.")
		fs.PrintDefaults()
	}
	cfgPath := cli.ConfigFlag(fs)
	object := fs.String("object", "", "only the rows about this object ID (a denied request's sha256: form included)")
	since := fs.String("since", "", "only the rows at or after this RFC 3339 time")
	asJSON := fs.Bool("json", false, "print JSON, as GET /v1/audit answers")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return exitUsage
	}
	q := map[string][]string{}
	if *object != "" {
		q["object"] = []string{*object}
	}
	if *since != "" {
		q["since"] = []string{*since}
	}
	f := ledger.AuditFilter{Tenant: ledger.AnyTenant, Limit: ledger.MaxAuditPage}
	if err := api.ParseAuditQuery(q, &f); err != nil {
		fmt.Fprintln(stderr, "stet audit list:", err)
		return exitUsage
	}
	db, code := cli.OpenLedger(ctx, *cfgPath, stderr)
	if db == nil {
		return code
	}
	defer db.Close()
	// The read is audited before anything is shown, as the API's is, and
	// lists the log as it was before that row; the object is named as the
	// API names it (api.AuditedObject), so an external ID typed here is not
	// written to the log.
	head, err := db.AuditHead(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "stet audit list:", err)
		return exitUnhealthy
	}
	f.Through = head
	if err := db.Audit(ctx, ledger.AuditEntry{Tenant: "*", Actor: "cli", Action: "audit.read", ObjectType: "audit_log",
		ObjectID: api.AuditedObject(f.Object), Route: "stet audit list", Now: time.Now().UTC()}); err != nil {
		fmt.Fprintln(stderr, "stet audit list: the read could not be audited:", err)
		return exitUnhealthy
	}
	w := newAuditWriter(stdout, *asJSON)
	for head > 0 { // an empty log before this read: nothing to list
		rows, next, err := db.AuditRows(ctx, f)
		if err != nil {
			fmt.Fprintln(stderr, "stet audit list:", err)
			return exitUnhealthy
		}
		for _, e := range rows {
			w.row(api.NewAuditRowView(e))
		}
		if next == 0 {
			break
		}
		f.After = next
	}
	w.close()
	return exitOK
}

// auditWriter prints audit rows as they are read: a table, or one JSON
// document whose rows are streamed.
type auditWriter struct {
	out  io.Writer
	json bool
	tw   *tabwriter.Writer
	n    int
}

func newAuditWriter(out io.Writer, asJSON bool) *auditWriter {
	w := &auditWriter{out: out, json: asJSON}
	if asJSON {
		fmt.Fprint(out, `{"rows":[`)
		return w
	}
	w.tw = tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w.tw, "at\ttenant\tactor\taction\tobject_type\tobject_id\troute\tremote_addr\trequest_id\toutcome\tcount")
	return w
}

func (w *auditWriter) row(v api.AuditRowView) {
	if w.json {
		b, _ := json.Marshal(v)
		if w.n > 0 {
			fmt.Fprint(w.out, ",")
		}
		fmt.Fprintf(w.out, "\n  %s", b)
		w.n++
		return
	}
	count := "-"
	if v.Count > 0 {
		count = fmt.Sprint(v.Count)
	}
	fmt.Fprintf(w.tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.At, v.Tenant, v.Actor, v.Action, dashed(v.ObjectType), dashed(v.ObjectID),
		dashed(v.Route), dashed(v.RemoteAddr), dashed(v.RequestID), v.Outcome, count)
	w.n++
}

func (w *auditWriter) close() {
	if w.json {
		if w.n > 0 {
			fmt.Fprint(w.out, "\n")
		}
		fmt.Fprintln(w.out, `],"next_cursor":null}`)
		return
	}
	_ = w.tw.Flush()
}

// dashed is s, or "-" for an empty cell.
func dashed(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
