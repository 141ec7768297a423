package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/internal/app"
	"github.com/stetlabs/stet/internal/backfill"
)

const importHelp = `Usage: stet import [flags] FILE.ndjson

Bulk backfill: each line of FILE is one report in the intake body's shape,
{"external_id": "…", "revision": 1, "text": "…", "metadata": {}}, accepted
for --source through the same identity and revision rules as a webhook
delivery (the source's signature is not needed: the file is trusted input).

Resumable: every line is its own delivery, keyed by its content, so running
the same file again skips what was accepted. A line that breaks the
source's rules is reported by its line number (never its text) and skipped;
the exit status is then 1.

--mode batch routes the new jobs to provider batches (the processor's batch
API), --mode sync to synchronous extraction; the default is the source's
mode. A running 'stet serve' on the same database extracts them.

Progress goes to stderr: a bar with rate and ETA on a terminal, plain lines
otherwise.

Flags:
`

func Import(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("import", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, importHelp); fs.PrintDefaults() }
	cfgPath := ConfigFlag(fs)
	sourceID := fs.String("source", "", "the source the reports belong to (required)")
	mode := fs.String("mode", "", "sync | batch (default: the source's mode)")
	asJSON := fs.Bool("json", false, "print the summary as JSON")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	if fs.NArg() != 1 || *sourceID == "" {
		fs.Usage()
		return ExitUsage
	}
	if *mode != "" && *mode != string(stet.ModeSync) && *mode != string(stet.ModeBatch) {
		fmt.Fprintln(stderr, "stet import: --mode must be sync or batch")
		return ExitUsage
	}
	path := fs.Arg(0)
	total, err := backfill.CountLines(path)
	if err != nil {
		fmt.Fprintln(stderr, "stet import:", err)
		return ExitUsage
	}
	cfg, ok := LoadOperatorConfig(*cfgPath, stderr)
	if !ok {
		return ExitUsage
	}
	a, err := app.Open(ctx, cfg, app.Options{Migrate: true, Logger: NewLogger(io.Discard, "error")})
	if err != nil {
		fmt.Fprintln(stderr, "stet import:", err)
		return ExitUnhealthy
	}
	defer a.Close()
	clock := stet.Clock(stet.SystemClock{})
	src, err := app.Source(cfg, *sourceID, clock)
	if err != nil {
		fmt.Fprintln(stderr, "stet import:", err)
		return ExitUsage
	}
	if src == nil {
		fmt.Fprintf(stderr, "stet import: no source %q in the config\n", *sourceID)
		return ExitUsage
	}
	if *mode != "" {
		src.Mode = stet.DispatchMode(*mode)
	}
	if err := a.Pipeline.Start(ctx); err != nil {
		fmt.Fprintln(stderr, "stet import:", err)
		return ExitUnhealthy
	}
	defer a.Pipeline.Stop(context.WithoutCancel(ctx))

	sm, err := backfill.Run(ctx, backfill.Options{Path: path, Source: src, Acceptor: a.Pipeline, BodyLimit: int64(cfg.BodyLimit),
		Clock: clock, Total: total, Progress: stderr})
	if err != nil {
		fmt.Fprintln(stderr, "stet import:", err)
		return ExitUsage
	}
	sm.WriteText(stdout, path, src.ID, src.Mode, *asJSON)
	switch {
	case sm.Stored != nil:
		fmt.Fprintln(stderr, "stet import: some lines could not be stored; run the same file again to resume:", stet.ErrorMessageOf(sm.Stored))
		return ExitUnhealthy
	case sm.Read != nil:
		fmt.Fprintln(stderr, "stet import:", sm.Read)
		return ExitFailure
	case sm.Interrupted:
		fmt.Fprintln(stderr, "stet import: interrupted; run the same file again to resume")
		return ExitFailure
	case sm.Rejected > 0 || sm.Conflict > 0:
		return ExitFailure
	}
	return ExitOK
}
