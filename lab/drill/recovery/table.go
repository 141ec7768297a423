package recovery

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// WriteTable prints the outcomes as stetlab drill's table, then each failed
// check under its drill.
func WriteTable(w io.Writer, outs []Outcome) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "drill\texpectation\treports\tjobs\trecords\tprovider calls\tduration\tok")
	for _, o := range outs {
		ok := "ok"
		if !o.OK {
			ok = "FAIL"
		}
		fmt.Fprintf(tw, "%s %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", o.Drill, o.Title, o.Expect,
			cell(o.Observed.Reports, o.Want.Reports), cell(o.Observed.Jobs, o.Want.Jobs),
			cell(o.Observed.Records, o.Want.Records), cell(o.Observed.Calls, o.Want.Calls),
			o.Duration.Round(10*time.Millisecond), ok)
	}
	_ = tw.Flush()
	for _, o := range outs {
		for _, f := range o.Failures {
			fmt.Fprintf(w, "drill %s: %s\n", o.Drill, f)
		}
	}
}

// cell is an observed count, with the wanted one when they differ.
func cell(got, want int) string {
	if got == want {
		return fmt.Sprint(got)
	}
	return fmt.Sprintf("%d (want %d)", got, want)
}

// Report is what stetlab drill [NAME…] prints: every outcome, and whether
// all of them passed.
type Report struct {
	OK     bool      `json:"ok"`
	Drills []Outcome `json:"drills"`
}

// RunAll runs drills one after another outside go test, announcing each on
// progress. It stops with ctx's error, before the next drill, once ctx
// ends.
func RunAll(ctx context.Context, drills []Drill, progress io.Writer) (*Report, error) {
	rep := &Report{OK: true, Drills: []Outcome{}}
	for _, d := range drills {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		fmt.Fprintf(progress, "stetlab drill: %s %s…\n", d.Name, d.Title)
		o := RunOutside(d)
		rep.OK = rep.OK && o.OK
		rep.Drills = append(rep.Drills, o)
	}
	return rep, nil
}

// WriteText prints the outcome table and PASS or FAIL.
func (r *Report) WriteText(w io.Writer) {
	WriteTable(w, r.Drills)
	if r.OK {
		fmt.Fprintln(w, "\nPASS")
	} else {
		fmt.Fprintln(w, "\nFAIL")
	}
}
