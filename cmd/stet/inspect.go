package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/internal/cli"
	"github.com/stetlabs/stet/ledger"
)

func cmdInspect(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: stet inspect [flags] SOURCE/EXTERNAL_ID | JOB_ID | REPORT_ID\n\nShows the stage timeline and attempts. Never prints document text.")
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
	db, code := cli.OpenLedger(ctx, *cfgPath, stderr)
	if db == nil {
		return code
	}
	defer db.Close()
	in, err := db.Inspect(ctx, fs.Arg(0))
	if errors.Is(err, ledger.ErrInspectTarget) {
		fs.Usage()
		return exitUsage
	}
	if err != nil {
		fmt.Fprintln(stderr, "stet inspect:", stet.ErrorMessageOf(err))
		if c := stet.ErrorCodeOf(err); c == stet.ENotFound || c == stet.EGone {
			return exitFailure
		}
		return exitUnhealthy
	}
	recs := partsRecords(ctx, db, in, stderr)
	// stet inspect is a read like any other: audited, by IDs, before it prints.
	if err := db.AuditAll(ctx, in.AuditEntries("cli", "stet inspect", time.Now().UTC())); err != nil {
		fmt.Fprintln(stderr, "stet inspect: the read could not be audited:", err)
		return exitUnhealthy
	}
	if *asJSON {
		cli.WriteJSON(stdout, api.NewInspectionView(in))
		return exitOK
	}
	writeInspection(stdout, in, recs)
	return exitOK
}

// partsRecords reads, for each job of a profile with parts that has a
// review record, that record, by job ID: where each of its fields came
// from and which part failed live on the record (docs/design.md §16), not
// on the job the ledger's inspection reads. Only IDs and names of it are
// printed, never its classification or note. A record that cannot be read
// (its data key not in this config, say) is named on stderr and left out:
// the timeline is still worth printing.
func partsRecords(ctx context.Context, db *ledger.DB, in *ledger.Inspection, stderr io.Writer) map[string]*stet.ReviewRecord {
	recs := map[string]*stet.ReviewRecord{}
	for _, d := range in.Jobs {
		if len(d.Parts) == 0 || d.Record == nil {
			continue
		}
		r, err := db.GetReview(ctx, d.Job.TenantID, d.Record.ID)
		if err != nil {
			fmt.Fprintf(stderr, "stet inspect: the provenance of review record %s is not shown: %s\n", d.Record.ID, stet.ErrorMessageOf(err))
			continue
		}
		recs[d.Job.ID] = r
	}
	return recs
}

// writeInspection prints in as Inspection.WriteText does, each job of a
// profile with parts followed by its record's failed part and provenance.
func writeInspection(w io.Writer, in *ledger.Inspection, recs map[string]*stet.ReviewRecord) {
	(&ledger.Inspection{Report: in.Report}).WriteText(w)
	for _, d := range in.Jobs {
		r := recs[d.Job.ID]
		if r == nil || (len(r.Provenance) == 0 && r.FailedPart == "") {
			d.WriteText(w)
			continue
		}
		// A job's block ends with a blank line: the record's lines go before it.
		var b bytes.Buffer
		d.WriteText(&b)
		w.Write(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
		if r.FailedPart != "" {
			fmt.Fprintf(w, "  failed part %s: the record is manual, the part's fields are the reviewer's to fill\n", r.FailedPart)
		}
		writeProvenance(w, d.Parts, r)
		fmt.Fprintln(w)
	}
}

// writeProvenance prints a line per field of r naming the part, processor
// and model that produced it: by part in the job's order (the config's),
// then by field name. Field names come from the profile's schema, never
// from a document.
func writeProvenance(w io.Writer, parts []ledger.PartDetail, r *stet.ReviewRecord) {
	if len(r.Provenance) == 0 {
		return
	}
	rank := func(field string) int {
		i := slices.IndexFunc(parts, func(p ledger.PartDetail) bool { return p.PartID == r.Provenance[field].Part })
		if i < 0 {
			return len(parts) // a part the job has no job for: last
		}
		return i
	}
	fields := slices.Collect(maps.Keys(r.Provenance))
	slices.SortFunc(fields, func(a, b string) int { return cmp.Or(cmp.Compare(rank(a), rank(b)), strings.Compare(a, b)) })
	fmt.Fprintf(w, "\n  record %s provenance\n", r.ID)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  field\tpart\tprocessor\tmodel")
	for _, f := range fields {
		src := r.Provenance[f]
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", f, src.Part, src.Processor, cmp.Or(src.Model, "-"))
	}
	tw.Flush()
}
