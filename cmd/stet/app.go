package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/admission"
	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/config"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/metrics"
	"github.com/stetlabs/stet/pipeline"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/anthropic"
	"github.com/stetlabs/stet/processor/azurecs"
	"github.com/stetlabs/stet/processor/gemini"
	"github.com/stetlabs/stet/processor/infrai"
	"github.com/stetlabs/stet/processor/openai"
	"github.com/stetlabs/stet/processor/rules"
)

// app is everything one stet process runs, wired from a config.
type app struct {
	cfg      *config.Config
	db       *ledger.DB
	log      *slog.Logger
	metrics  *metrics.Metrics
	pipeline *pipeline.Pipeline
	api      *api.Server
	unlock   func()
	// stopTracing flushes and stops the trace exporter (none: a no-op).
	stopTracing func(context.Context) error
}

type appOptions struct {
	role    string // api | worker | all
	logger  *slog.Logger
	migrate bool
	clock   stet.Clock
	// pollInterval overrides River's fetch poll interval (benchmarks, tests).
	pollInterval time.Duration
}

// loadConfig loads a config, printing every problem to stderr.
func loadConfig(path string, stderr io.Writer) (*config.Config, bool) {
	cfg, err := config.Load(path, os.Getenv)
	if err != nil {
		fmt.Fprintln(stderr, "stet:", err)
		return nil, false
	}
	return cfg, true
}

// loadOperatorConfig loads a config for a command that never serves or
// calls a processor: secret variables may be unset.
func loadOperatorConfig(path string, stderr io.Writer) (*config.Config, bool) {
	cfg, err := config.LoadWithoutSecrets(path, os.Getenv)
	if err != nil {
		fmt.Fprintln(stderr, "stet:", err)
		return nil, false
	}
	return cfg, true
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}

// openApp opens the ledger, migrates if asked, and builds the pipeline and
// the API. It starts nothing.
func openApp(ctx context.Context, cfg *config.Config, o appOptions) (*app, error) {
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	if o.clock == nil {
		o.clock = stet.SystemClock{}
	}
	a := &app{cfg: cfg, log: o.logger, unlock: func() {}, stopTracing: func(context.Context) error { return nil }}
	if path, ok := strings.CutPrefix(cfg.Database, "sqlite://"); ok && o.role != "" {
		// One SQLite file is for one process: a second serve on the same
		// file would fight over the single writer.
		unlock, err := lockFile(strings.SplitN(path, "?", 2)[0] + ".lock")
		if err != nil {
			return nil, err
		}
		a.unlock = unlock
	}
	db, err := ledger.Open(ctx, cfg.Database)
	if err != nil {
		a.unlock()
		return nil, err
	}
	a.db = db
	if o.migrate {
		if err := migrateAll(ctx, db); err != nil {
			a.close()
			return nil, err
		}
	}
	if err := useEncryption(ctx, db, cfg, o.logger, o.role != ""); err != nil {
		a.close()
		return nil, err
	}
	a.metrics = metrics.New(db, o.logger)

	procs := map[string]stet.Processor{}
	limits := map[string]admission.Limits{}
	batch := map[string]pipeline.BatchSettings{}
	for i := range cfg.Processors {
		pc := &cfg.Processors[i]
		batch[pc.ID] = pipeline.BatchSettings{MaxItems: pc.Batch.MaxItems, MaxWait: pc.Batch.MaxWait.Std(),
			PollFirst: pc.Batch.PollFirst.Std(), PollMax: pc.Batch.PollMax.Std(), OnExpired: pc.Batch.OnExpired}
		limits[pc.ID] = admission.Limits{RPM: pc.Limits.RPM, TPM: pc.Limits.TPM, Concurrency: pc.Limits.Concurrency}
		p, err := newProcessor(pc, cfg)
		if err != nil {
			a.close()
			return nil, err
		}
		if p == nil {
			o.logger.Warn("processor kind not available in this build; jobs routed to it are blocked", "processor", pc.ID, "kind", pc.Kind)
			continue
		}
		procs[pc.ID] = p
	}
	var profiles []*pipeline.Profile
	for i := range cfg.Profiles {
		p, err := pipeline.NewProfile(*cfg.Profiles[i].Domain())
		if err != nil {
			a.close()
			return nil, err
		}
		profiles = append(profiles, p)
	}
	var policies []*stet.Policy
	for i := range cfg.Policies {
		policies = append(policies, cfg.Policies[i].Domain())
	}
	tp, stopTracing, err := newTracerProvider(ctx, cfg, os.Getenv)
	if err != nil {
		a.close()
		return nil, err
	}
	a.stopTracing = stopTracing
	role := cmp(o.role, "all")
	pl, err := pipeline.New(pipeline.Config{
		DB: db, Processors: procs, Limits: limits, Batch: batch, AssembleEvery: cfg.Workers.AssembleEvery.Std(), Profiles: profiles, Policies: policies,
		Logger: o.logger, Metrics: a.metrics, Clock: o.clock,
		Concurrency: cfg.Workers.Concurrency, JobTimeout: cfg.Workers.JobTimeout.Std(),
		RescueAfter: cfg.Workers.RescueAfter.Std(), MaxAttempts: cfg.Workers.MaxAttempts,
		Heartbeat: cfg.Workers.Heartbeat.Std(), DeadAfter: cfg.Workers.DeadAfter.Std(),
		PollInterval:   cmpDuration(o.pollInterval, cfg.Workers.PollInterval.Std()),
		SweepInterval:  cfg.Workers.SweepInterval.Std(),
		Encryption:     db.Encrypted(),
		Work:           o.role == "worker" || o.role == "all",
		SingleProcess:  strings.HasPrefix(cfg.Database, "sqlite://") && o.role != "",
		Destinations:   destinations(cfg),
		TracerProvider: tp,
	})
	if err != nil {
		a.close()
		return nil, err
	}
	a.pipeline = pl

	if o.role == "" {
		return a, nil // an operator command: no API
	}
	sources, err := apiSources(cfg, o.clock)
	if err != nil {
		a.close()
		return nil, err
	}
	var tokens []api.Token
	for _, t := range cfg.Tenants {
		for _, tok := range t.Tokens {
			tokens = append(tokens, api.Token{Name: tok.Name, Tenant: t.ID, Role: tok.Role, Value: tok.Value})
		}
	}
	var admins []api.Admin
	for _, ad := range cfg.Admins {
		admins = append(admins, api.Admin{Name: ad.Name, Value: ad.Value})
	}
	quotas := map[string]api.IntakeLimit{}
	for _, t := range cfg.Tenants {
		if t.Intake != nil {
			quotas[t.ID] = api.IntakeLimit{RPS: t.Intake.RPS, Burst: t.Intake.Burst}
		}
	}
	a.api = api.New(api.Config{
		DB: db, Acceptor: pl, Manual: pl, Deleter: pl, Discovery: buildDiscovery(cfg, cfg.Encryption != nil),
		Sources: sources, Tokens: tokens, Admins: admins, IntakeLimits: quotas, Logger: o.logger, Metrics: a.metrics,
		Clock: o.clock, BodyLimit: int64(cfg.BodyLimit), HealthOnly: role == "worker", NoMetrics: cfg.MetricsListen != "",
		TracerProvider: tp,
	})
	if role != "worker" {
		if err := mountUI(a, o.clock); err != nil {
			a.close()
			return nil, err
		}
	}
	return a, nil
}

func cmpDuration(a, b time.Duration) time.Duration {
	if a != 0 {
		return a
	}
	return b
}

func cmp(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// newProcessor builds a processor from its config; nil for kinds this build
// does not have yet (their jobs are blocked, never re-routed).
func newProcessor(pc *config.Processor, cfg *config.Config) (stet.Processor, error) {
	return newProcessorClient(pc, cfg, nil)
}

// newProcessorClient builds a processor that sends through hc (nil: the
// processor's own client). Wiring a kind is one case: the shared settings
// are built once, as processor.Common.
func newProcessorClient(pc *config.Processor, cfg *config.Config, hc *http.Client) (stet.Processor, error) {
	c := processor.Common{
		ID: pc.ID, BaseURL: pc.BaseURL, APIKey: pc.APIKey, Model: pc.Model, Region: pc.Region,
		Retention: pc.Retention, ZeroRetention: pc.ZeroRetention, Subprocessors: pc.Subprocessors,
		Timeout: pc.Timeout.Std(), HTTPClient: hc,
	}
	switch pc.Kind {
	case config.KindRules:
		return rules.New(rules.Params{ID: pc.ID, RulesPath: pc.Rules})
	case config.KindOpenAI:
		return openai.New(openai.Config{Common: c, AzureAPIVersion: pc.APIVersion})
	case config.KindAnthropic:
		return anthropic.New(anthropic.Config{Common: c, MaxTokens: int64(pc.MaxTokens), ToolUse: pc.ToolUse})
	case config.KindInfrai:
		return infrai.New(infrai.Config{Common: c})
	case config.KindGemini:
		return gemini.NewBatch(gemini.Config{Common: c})
	case config.KindAzureContentSafety:
		// The label stays the one the adapter derives from the API version
		// and the mapping, as it always has: a configured model is not used.
		c.Model = ""
		return azurecs.New(azurecs.Config{Common: c, APIVersion: pc.APIVersion, MappingPath: pc.Mapping})
	default:
		return nil, nil
	}
}

func migrateAll(ctx context.Context, db *ledger.DB) error {
	if _, err := db.Migrate(ctx); err != nil {
		return fmt.Errorf("migrate ledger: %w", err)
	}
	if err := pipeline.Migrate(ctx, db); err != nil {
		return err
	}
	return nil
}

func (a *app) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := a.stopTracing(ctx); err != nil {
		a.log.Warn("trace exporter did not flush", "err", err)
	}
	cancel()
	if a.db != nil {
		a.db.Close()
	}
	a.unlock()
}

// lockFile takes an exclusive advisory lock, or fails at once.
func lockFile(path string) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another stet process is using this SQLite database (%s is locked); one SQLite file is for one process — scale out on PostgreSQL", path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// configFlag adds the --config flag.
func configFlag(fs *flag.FlagSet) *string {
	return fs.String("config", "stet.yaml", "path of the YAML config file")
}

func migrateRiver(ctx context.Context, db *ledger.DB) error { return pipeline.Migrate(ctx, db) }

// apiSources builds the intake's sources from the config: intake and stet
// import accept through them.
func apiSources(cfg *config.Config, clock stet.Clock) ([]*api.Source, error) {
	var sources []*api.Source
	for i := range cfg.Sources {
		s := &cfg.Sources[i]
		var v *api.Verifier
		if len(s.Secrets) > 0 { // an operator command (stet import) loads no secrets and verifies nothing
			var err error
			if v, err = api.NewVerifier(s.Secrets, clock); err != nil {
				return nil, fmt.Errorf("source %s: %w", s.ID, err)
			}
		}
		prof := cfg.Profile(s.Profile)
		pol := cfg.Policy(s.Policy).Domain()
		sources = append(sources, &api.Source{
			ID: s.ID, Tenant: s.Tenant, Identity: s.Identity, Revisions: s.Revisions, Verifier: v, Mode: s.Mode,
			PolicyID: pol.ID, PolicyHash: pol.Hash(), ProfileID: prof.ID, ProfileVersion: prof.Version, Schema: prof.Validator,
		})
	}
	return sources, nil
}
