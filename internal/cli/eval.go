package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/config"
	"github.com/stetlabs/stet/eval"
	"github.com/stetlabs/stet/internal/app"
)

// DemoFakes starts scripted fakes for an offline demo: it reads the fakes
// file at path, starts one fake per processor it names, records each fake's
// base URL in fakes (by processor ID) and returns how to stop them. Only the
// lab binary has one; the product never links a fake.
type DemoFakes func(path string, cfg *config.Config, profile string, pol *stet.Policy, items []eval.Item, fakes map[string]string) (stop func(), err error)

// Eval is stet eval: it compares processors on labelled data in a scratch
// ledger. With demo non-nil it takes --demo-fakes too.
func Eval(ctx context.Context, args []string, stdout, stderr io.Writer, demo DemoFakes) int {
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := ConfigFlag(fs)
	profile := fs.String("profile", "", "the profile whose labelled data this is (required)")
	source := fs.String("source", "", "the source whose policy decides what is permitted, when sources of the profile differ")
	labels := fs.String("labels", "", "labels file, JSONL: {\"external_id\",\"text\",\"expected\":{…}} a line (required)")
	procs := fs.String("processors", "", "processor IDs to compare, comma-separated (required)")
	out := fs.String("out", "eval-out", "folder for the scratch ledger, report.json and report.html")
	gate := fs.Bool("gate", false, "exit 1 if any processor fails the profile's acceptance rule")
	pauseOnFail := fs.Bool("pause-on-fail", false, "pause dispatch of every failing processor in the production ledger (audited)")
	concurrency := fs.Int("concurrency", 0, "extractions at once (default: workers.concurrency)")
	format := fs.String("format", "table", "what to print: table | json | none")
	var demoFakes *string
	if demo != nil {
		demoFakes = fs.String("demo-fakes", "", "start the scripted fakes of this file in process and point their processors at them (offline demos)")
	}
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	if *profile == "" || *labels == "" || *procs == "" {
		fmt.Fprintln(stderr, "stet eval: --profile, --labels and --processors are required")
		return ExitUsage
	}
	if *format != "table" && *format != "json" && *format != "none" {
		fmt.Fprintln(stderr, "stet eval: --format must be table, json or none")
		return ExitUsage
	}
	cfg, ok := LoadOperatorConfig(*cfgPath, stderr)
	if !ok {
		return ExitUsage
	}
	items, bad, err := eval.LoadLabels(*labels)
	if err != nil {
		fmt.Fprintln(stderr, "stet eval:", err)
		return ExitUsage
	}
	for _, b := range bad {
		fmt.Fprintf(stderr, "stet eval: %s: %s\n", *labels, b)
	}
	asked := strings.Split(*procs, ",")
	for i := range asked {
		asked[i] = strings.TrimSpace(asked[i])
	}
	pol, _, refused, err := eval.Plan(cfg, *profile, *source, asked)
	if err != nil {
		fmt.Fprintln(stderr, "stet eval:", err)
		return ExitUsage
	}
	for _, r := range refused {
		fmt.Fprintf(stderr, "stet eval: %s refused: %s; no call is made\n", r.Processor, r.Reason)
	}

	fakes := map[string]string{} // processor ID → fake base URL
	if demoFakes != nil && *demoFakes != "" {
		stop, err := demo(*demoFakes, cfg, *profile, pol, items, fakes)
		if err != nil {
			fmt.Fprintln(stderr, "stet eval:", err)
			return ExitUsage
		}
		defer stop()
	}
	calls := *concurrency
	if calls <= 0 {
		calls = cfg.Workers.Concurrency
	}
	hc := app.ProcessorClient(calls)
	newProc := func(pc *config.Processor) (stet.Processor, error) {
		if u, ok := fakes[pc.ID]; ok {
			pc.BaseURL, pc.APIKey, pc.APIVersion = u, "demo-fake", ""
		} else if pc.APIKeyEnv != "" && pc.Kind != config.KindRules && pc.APIKey == "" {
			return nil, fmt.Errorf("environment variable %s is not set", pc.APIKeyEnv)
		}
		return app.NewProcessor(pc, cfg, hc)
	}
	keys, err := app.Keyring(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "stet eval:", err)
		return ExitUsage
	}
	rep, err := eval.Run(ctx, eval.Params{
		Config: cfg, Profile: *profile, Source: *source, Labels: *labels, Items: items, BadLines: bad,
		Processors: asked, New: newProc, Out: *out, Concurrency: *concurrency,
		Progress: stderr, Terminal: eval.IsTerminal(stderr), Logger: NewLogger(io.Discard, "error"), Keyring: keys,
	})
	if errors.Is(err, eval.ErrInterrupted) {
		fmt.Fprintln(stderr, "stet eval:", err)
		return ExitFailure
	}
	if err != nil {
		fmt.Fprintln(stderr, "stet eval:", err)
		return ExitUnhealthy
	}
	if err := eval.WriteFiles(*out, rep); err != nil {
		fmt.Fprintln(stderr, "stet eval: write the report:", err)
		return ExitUnhealthy
	}
	rep.Print(stdout, *format, *out)
	if *pauseOnFail && !rep.Passed() {
		db, code := OpenLedger(ctx, *cfgPath, stderr)
		if db == nil {
			return code
		}
		defer db.Close()
		if err := eval.PauseFailing(ctx, db, rep, stdout); err != nil {
			fmt.Fprintln(stderr, "stet eval:", err)
			return ExitUnhealthy
		}
	}
	if (*gate && !rep.Passed()) || len(bad) > 0 {
		return ExitFailure
	}
	return ExitOK
}
