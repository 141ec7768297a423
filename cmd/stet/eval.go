package main

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
	"github.com/stetlabs/stet/internal/evalfake"
)

func cmdEval(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := configFlag(fs)
	profile := fs.String("profile", "", "the profile whose labelled data this is (required)")
	source := fs.String("source", "", "the source whose policy decides what is permitted, when sources of the profile differ")
	labels := fs.String("labels", "", "labels file, JSONL: {\"external_id\",\"text\",\"expected\":{…}} a line (required)")
	procs := fs.String("processors", "", "processor IDs to compare, comma-separated (required)")
	out := fs.String("out", "eval-out", "folder for the scratch ledger, report.json and report.html")
	gate := fs.Bool("gate", false, "exit 1 if any processor fails the profile's acceptance rule")
	pauseOnFail := fs.Bool("pause-on-fail", false, "pause dispatch of every failing processor in the production ledger (audited)")
	concurrency := fs.Int("concurrency", 0, "extractions at once (default: workers.concurrency)")
	format := fs.String("format", "table", "what to print: table | json | none")
	demoFakes := fs.String("demo-fakes", "", "start the scripted fakes of this file in process and point their processors at them (offline demos)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if *profile == "" || *labels == "" || *procs == "" {
		fmt.Fprintln(stderr, "stet eval: --profile, --labels and --processors are required")
		return exitUsage
	}
	if *format != "table" && *format != "json" && *format != "none" {
		fmt.Fprintln(stderr, "stet eval: --format must be table, json or none")
		return exitUsage
	}
	cfg, ok := loadOperatorConfig(*cfgPath, stderr)
	if !ok {
		return exitUsage
	}
	items, bad, err := eval.LoadLabels(*labels)
	if err != nil {
		fmt.Fprintln(stderr, "stet eval:", err)
		return exitUsage
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
		return exitUsage
	}
	for _, r := range refused {
		fmt.Fprintf(stderr, "stet eval: %s refused: %s; no call is made\n", r.Processor, r.Reason)
	}

	fakes := map[string]string{} // processor ID → fake base URL
	if *demoFakes != "" {
		stop, err := evalfake.StartDemo(*demoFakes, cfg, *profile, pol, items, fakes)
		if err != nil {
			fmt.Fprintln(stderr, "stet eval:", err)
			return exitUsage
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
		return exitUsage
	}
	rep, err := eval.Run(ctx, eval.Params{
		Config: cfg, Profile: *profile, Source: *source, Labels: *labels, Items: items, BadLines: bad,
		Processors: asked, New: newProc, Out: *out, Concurrency: *concurrency,
		Progress: stderr, Terminal: eval.IsTerminal(stderr), Logger: newLogger(io.Discard, "error"), Keyring: keys,
	})
	if errors.Is(err, eval.ErrInterrupted) {
		fmt.Fprintln(stderr, "stet eval:", err)
		return exitFailure
	}
	if err != nil {
		fmt.Fprintln(stderr, "stet eval:", err)
		return exitUnhealthy
	}
	if err := eval.WriteFiles(*out, rep); err != nil {
		fmt.Fprintln(stderr, "stet eval: write the report:", err)
		return exitUnhealthy
	}
	rep.Print(stdout, *format, *out)
	if *pauseOnFail && !rep.Passed() {
		db, code := openLedger(ctx, *cfgPath, stderr)
		if db == nil {
			return code
		}
		defer db.Close()
		if err := eval.PauseFailing(ctx, db, rep, stdout); err != nil {
			fmt.Fprintln(stderr, "stet eval:", err)
			return exitUnhealthy
		}
	}
	if (*gate && !rep.Passed()) || len(bad) > 0 {
		return exitFailure
	}
	return exitOK
}
