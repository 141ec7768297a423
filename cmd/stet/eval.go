package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/boundary"
	"github.com/stetlabs/stet/config"
	"github.com/stetlabs/stet/eval"
	"github.com/stetlabs/stet/internal/evalfake"
	"github.com/stetlabs/stet/ledger"
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
		stop, err := startFakes(*demoFakes, cfg, *profile, pol, items, fakes)
		if err != nil {
			fmt.Fprintln(stderr, "stet eval:", err)
			return exitUsage
		}
		defer stop()
	}
	newProc := func(pc *config.Processor) (stet.Processor, error) {
		if u, ok := fakes[pc.ID]; ok {
			pc.BaseURL, pc.APIKey, pc.APIVersion = u, "demo-fake", ""
		} else if lookupNeedsKey(pc) && pc.APIKey == "" {
			return nil, fmt.Errorf("environment variable %s is not set", pc.APIKeyEnv)
		}
		return newProcessor(pc, cfg)
	}
	keys, err := keyring(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "stet eval:", err)
		return exitUsage
	}
	rep, err := eval.Run(ctx, eval.Params{
		Config: cfg, Profile: *profile, Source: *source, Labels: *labels, Items: items, BadLines: bad,
		Processors: asked, New: newProc, Out: *out, Concurrency: *concurrency,
		Progress: stderr, Terminal: isTerminalWriter(stderr), Logger: newLogger(io.Discard, "error"), Keyring: keys,
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
	switch *format {
	case "table":
		_ = eval.Table(stdout, rep)
		fmt.Fprintf(stdout, "\nreport: %s, %s\n", filepath.Join(*out, "report.html"), filepath.Join(*out, "report.json"))
	case "json":
		_ = json.NewEncoder(stdout).Encode(rep)
	}
	code := exitOK
	if *pauseOnFail && !rep.Passed() {
		if c := pauseFailing(ctx, *cfgPath, rep, stdout, stderr); c != exitOK {
			return c
		}
	}
	if (*gate && !rep.Passed()) || len(bad) > 0 {
		code = exitFailure
	}
	return code
}

func lookupNeedsKey(pc *config.Processor) bool {
	return pc.APIKeyEnv != "" && pc.Kind != config.KindRules
}

func isTerminalWriter(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// pauseFailing pauses, in the production ledger, every processor that was
// run and failed its acceptance rule: the pause and its audit entry are the
// only production writes an eval makes.
func pauseFailing(ctx context.Context, cfgPath string, rep *eval.Report, stdout, stderr io.Writer) int {
	db, code := openLedger(ctx, cfgPath, stderr)
	if db == nil {
		return code
	}
	defer db.Close()
	for _, p := range rep.Processors {
		if p.Refused != "" || p.Acceptance.Pass {
			continue
		}
		_, why := eval.Verdict(p)
		reason := fmt.Sprintf("stet eval of %s failed the acceptance rule: %s", rep.Profile, why)
		scope := "processor:" + p.ID
		if err := db.SetPause(ctx, ledger.Pause{Scope: scope, Reason: reason, PausedBy: "stet eval", PausedAt: time.Now().UTC()}, "*"); err != nil {
			fmt.Fprintln(stderr, "stet eval: pause", scope+":", stet.ErrorMessageOf(err))
			return exitUnhealthy
		}
		fmt.Fprintf(stdout, "paused dispatch for %s: %s\n", scope, reason)
	}
	return exitOK
}

// startFakes starts the scripted fakes of a --demo-fakes file, each shown
// the labelled documents minimized as the policy minimizes them.
func startFakes(path string, cfg *config.Config, profileID string, pol *stet.Policy, items []eval.Item, urls map[string]string) (func(), error) {
	f, err := evalfake.Load(path)
	if err != nil {
		return nil, err
	}
	mz, err := boundary.NewMinimizer(pol.Minimize, pol.Names)
	if err != nil {
		return nil, err
	}
	docs := make([]evalfake.Doc, len(items))
	for i, it := range items {
		t, _ := mz.Minimize(stet.NewText(it.Text))
		docs[i] = evalfake.Doc{Text: t.Reveal(), Expected: it.Expected}
	}
	var started []*evalfake.Fake
	stop := func() {
		for _, s := range started {
			s.Close()
		}
	}
	for _, b := range f.Fakes {
		pc := cfg.Processor(b.Processor)
		if pc == nil || pc.Kind != config.KindOpenAI {
			stop()
			return nil, fmt.Errorf("demo fakes %s: %q is not an openai processor of the config", path, b.Processor)
		}
		fk, err := evalfake.Start(b, cfg.Profile(profileID).SchemaJSON, docs)
		if err != nil {
			stop()
			return nil, err
		}
		started = append(started, fk)
		urls[b.Processor] = fk.URL()
	}
	return stop, nil
}
