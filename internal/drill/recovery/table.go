package recovery

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// WriteTable prints the outcomes as stet drill's table, then each failed
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
