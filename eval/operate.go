package eval

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger"
)

// Print writes the report to w as format says: "table" (the table and
// where the files in dir are), "json", or "none" (nothing).
func (r *Report) Print(w io.Writer, format, dir string) {
	switch format {
	case "table":
		_ = Table(w, r)
		fmt.Fprintf(w, "\nreport: %s, %s\n", filepath.Join(dir, "report.html"), filepath.Join(dir, "report.json"))
	case "json":
		_ = json.NewEncoder(w).Encode(r)
	}
}

// PauseFailing pauses dispatch, in the production ledger db, of every
// processor that was run and failed its acceptance rule, printing each
// pause to w: the pause and its audit entry are the only production
// writes an eval makes.
func PauseFailing(ctx context.Context, db *ledger.DB, r *Report, w io.Writer) error {
	for _, p := range r.Processors {
		if p.Refused != "" || p.Acceptance.Pass {
			continue
		}
		_, why := Verdict(p)
		reason := fmt.Sprintf("stet eval of %s failed the acceptance rule: %s", r.Profile, why)
		scope := "processor:" + p.ID
		if err := db.SetPause(ctx, ledger.Pause{Scope: scope, Reason: reason, PausedBy: "stet eval", PausedAt: time.Now().UTC()}, "*"); err != nil {
			return fmt.Errorf("pause %s: %s", scope, stet.ErrorMessageOf(err))
		}
		fmt.Fprintf(w, "paused dispatch for %s: %s\n", scope, reason)
	}
	return nil
}

// IsTerminal reports whether w is a terminal, where progress is a bar.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
