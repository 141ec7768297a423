package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/stetlabs/stet/lab/cluster"
)

// ImportOptions are the settings of Import.
type ImportOptions struct {
	Stet        Stet
	Dir         string // scratch folder
	Database    string // a postgres:// server for a scratch schema; "": a scratch SQLite file
	N           int    // lines (1M)
	Slice       int    // lines per slice; default 100,000
	Concurrency int    // the intake baseline's HTTP clients
}

// ImportSlice is one slice of the import.
type ImportSlice struct {
	From    int           `json:"from"` // lines already in the ledger before it
	Lines   int           `json:"lines"`
	Elapsed time.Duration `json:"elapsed_ns"`
	Rate    float64       `json:"lines_per_s"`
}

// ImportResult is what Import measures.
type ImportResult struct {
	Settings   string        `json:"settings"`
	Lines      int           `json:"lines"`
	Elapsed    time.Duration `json:"elapsed_ns"`
	Rate       float64       `json:"lines_per_s"`
	Slices     []ImportSlice `json:"slices"`
	IntakeRate float64       `json:"intake_deliveries_per_s"` // the baseline, same run
	Ratio      float64       `json:"ratio"`
}

// Import runs stet import of o.N lines into one ledger, in files of
// o.Slice lines one after the other, so the rate of each slice shows
// whether it stays flat as the ledger grows; the baseline is intake's
// deliveries/s (the intake benchmark, 5,000 deliveries) in the same run.
func Import(ctx context.Context, o ImportOptions) (*ImportResult, error) {
	if o.Slice == 0 {
		o.Slice = 100000
	}
	database, drop, err := cluster.ScratchSchema(ctx, o.Database)
	if err != nil {
		return nil, err
	}
	defer drop()
	dir := filepath.Join(o.Dir, "import")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	cfgPath, _, err := writeConfig(dir, database, "http://127.0.0.1:1", "", 16)
	if err != nil {
		return nil, err
	}
	res := &ImportResult{Lines: o.N}
	file := filepath.Join(dir, "slice.ndjson")
	for from := 0; from < o.N; from += o.Slice {
		to := min(from+o.Slice, o.N)
		if err := writeNDJSON(file, from, to); err != nil {
			return nil, err
		}
		start := time.Now()
		if err := o.Stet.Import(ctx, []string{"--config", cfgPath, "--source", source, "--mode", "sync", file}); err != nil {
			return nil, fmt.Errorf("import lines %d-%d: %w", from, to, err)
		}
		el := time.Since(start)
		res.Elapsed += el
		res.Slices = append(res.Slices, ImportSlice{From: from, Lines: to - from, Elapsed: el, Rate: float64(to-from) / el.Seconds()})
	}
	os.Remove(file)
	res.Rate = float64(o.N) / res.Elapsed.Seconds()

	intake, err := Intake(ctx, IntakeOptions{Stet: o.Stet, Dir: filepath.Join(o.Dir, "intake"), Database: o.Database, N: 5000, Concurrency: o.Concurrency})
	if err != nil {
		return nil, fmt.Errorf("intake baseline: %w", err)
	}
	res.Settings = intake.Settings
	res.IntakeRate = intake.Rate
	res.Ratio = res.Rate / res.IntakeRate
	return res, nil
}

// WriteText prints the figures for a reader.
func (r *ImportResult) WriteText(w io.Writer) {
	fmt.Fprintf(w, "import  (%s)\n", r.Settings)
	for _, s := range r.Slices {
		fmt.Fprintf(w, "  lines %8d-%-8d %8.1f lines/s  (%s)\n", s.From, s.From+s.Lines, s.Rate, s.Elapsed.Round(time.Millisecond))
	}
	fmt.Fprintf(w, "  stet import %8.1f lines/s  (%d in %s)\n", r.Rate, r.Lines, r.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(w, "  baseline    %8.1f deliveries/s  (intake through the HTTP API, 5000 deliveries, same run)\n", r.IntakeRate)
	fmt.Fprintf(w, "  ratio       %8.2f\n", r.Ratio)
}
