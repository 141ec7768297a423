// Package app builds the running stet service from a config: it opens the
// ledger (migrating if asked), gives it its keys, and wires the processors,
// the pipeline, the API and the review UI. cmd/stet's commands open an App
// and drive it; nothing here parses flags.
package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
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
	"github.com/stetlabs/stet/processor/transcribe"
	"github.com/stetlabs/stet/processor/transcribe/pocketsphinx"
	"github.com/stetlabs/stet/webhook"
)

// App is everything one stet process runs, wired from a config.
type App struct {
	Config   *config.Config
	DB       *ledger.DB
	Log      *slog.Logger
	Metrics  *metrics.Metrics
	Pipeline *pipeline.Pipeline
	API      *api.Server // nil for an operator command (Options.Role "")
	unlock   func()
	// stopTracing flushes and stops the trace exporter (none: a no-op).
	stopTracing func(context.Context) error
}

// Options say what Open builds.
type Options struct {
	Role    string // api | worker | all; "" an operator command: no API, no SQLite lock
	Logger  *slog.Logger
	Migrate bool
	Clock   stet.Clock
	// PollInterval overrides River's fetch poll interval (benchmarks, tests).
	PollInterval time.Duration
}

// Open opens the ledger, migrates if asked, and builds the pipeline and
// the API. It starts nothing.
func Open(ctx context.Context, cfg *config.Config, o Options) (*App, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = stet.SystemClock{}
	}
	a := &App{Config: cfg, Log: o.Logger, unlock: func() {}, stopTracing: func(context.Context) error { return nil }}
	if path, ok := strings.CutPrefix(cfg.Database, "sqlite://"); ok && o.Role != "" {
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
	a.DB = db
	if o.Migrate {
		if err := Migrate(ctx, db); err != nil {
			a.Close()
			return nil, err
		}
	}
	if err := UseEncryption(ctx, db, cfg, o.Logger, o.Role != ""); err != nil {
		a.Close()
		return nil, err
	}
	a.Metrics = metrics.New(db, o.Logger)

	procs := map[string]stet.Processor{}
	limits := map[string]admission.Limits{}
	batch := map[string]pipeline.BatchSettings{}
	prices := map[string]ledger.Price{}
	budgets := map[string]float64{}
	hc := ProcessorClient(cfg.Workers.Concurrency)
	for i := range cfg.Processors {
		pc := &cfg.Processors[i]
		prices[pc.ID] = ledger.Price{InputPerMTok: pc.Price.InputPerMTok, OutputPerMTok: pc.Price.OutputPerMTok, BatchDiscount: pc.Price.BatchDiscount}
		if pc.Budget.PerDayUSD > 0 {
			budgets[pc.ID] = pc.Budget.PerDayUSD
		}
		batch[pc.ID] = pipeline.BatchSettings{MaxItems: pc.Batch.MaxItems, MaxWait: pc.Batch.MaxWait.Std(),
			PollFirst: pc.Batch.PollFirst.Std(), PollMax: pc.Batch.PollMax.Std(), OnExpired: pc.Batch.OnExpired}
		limits[pc.ID] = admission.Limits{RPM: pc.Limits.RPM, TPM: pc.Limits.TPM, Concurrency: pc.Limits.Concurrency}
		p, err := NewProcessor(pc, cfg, hc)
		if err != nil {
			a.Close()
			return nil, err
		}
		if p == nil {
			o.Logger.Warn("processor kind not available in this build; jobs routed to it are blocked", "processor", pc.ID, "kind", pc.Kind)
			continue
		}
		procs[pc.ID] = p
	}
	transcribers := map[string]transcribe.Transcriber{}
	for i := range cfg.Transcribers {
		tc := &cfg.Transcribers[i]
		limits[tc.ID] = admission.Limits{RPM: tc.Limits.RPM, TPM: tc.Limits.TPM, Concurrency: tc.Limits.Concurrency}
		t, err := NewTranscriber(tc, hc)
		if err != nil {
			a.Close()
			return nil, err
		}
		transcribers[tc.ID] = t
	}
	var profiles []*pipeline.Profile
	for i := range cfg.Profiles {
		p, err := pipeline.NewProfile(*cfg.Profiles[i].Domain())
		if err != nil {
			a.Close()
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
		a.Close()
		return nil, err
	}
	a.stopTracing = stopTracing
	role := cmp.Or(o.Role, "all")
	pl, err := pipeline.New(pipeline.Config{
		DB: db, Processors: procs, Transcribers: transcribers, Limits: limits, Batch: batch, AssembleEvery: cfg.Workers.AssembleEvery.Std(), Profiles: profiles, Policies: policies,
		Prices: prices, Budgets: budgets,
		Logger: o.Logger, Metrics: a.Metrics, Clock: o.Clock,
		Concurrency: cfg.Workers.Concurrency, JobTimeout: cfg.Workers.JobTimeout.Std(),
		RescueAfter: cfg.Workers.RescueAfter.Std(), MaxAttempts: cfg.Workers.MaxAttempts,
		Heartbeat: cfg.Workers.Heartbeat.Std(), DeadAfter: cfg.Workers.DeadAfter.Std(),
		PollInterval:   cmp.Or(o.PollInterval, cfg.Workers.PollInterval.Std()),
		SweepInterval:  cfg.Workers.SweepInterval.Std(),
		Encryption:     db.Encrypted(),
		Work:           o.Role == "worker" || o.Role == "all",
		SingleProcess:  strings.HasPrefix(cfg.Database, "sqlite://") && o.Role != "",
		Destinations:   Destinations(cfg),
		TracerProvider: tp,
	})
	if err != nil {
		a.Close()
		return nil, err
	}
	a.Pipeline = pl

	if o.Role == "" {
		return a, nil // an operator command: no API
	}
	sources, err := Sources(cfg, o.Clock)
	if err != nil {
		a.Close()
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
	a.API = api.New(api.Config{
		DB: db, Acceptor: pl, Manual: pl, Rerouter: pl, Deleter: pl.Governance(), Discovery: Discovery(cfg, cfg.Encryption != nil, procs),
		Sources: sources, Tokens: tokens, Admins: admins, IntakeLimits: quotas, Logger: o.Logger, Metrics: a.Metrics,
		Clock: o.Clock, BodyLimit: int64(cfg.BodyLimit), HealthOnly: role == "worker", NoMetrics: cfg.MetricsListen != "",
		TracerProvider: tp,
	})
	if role != "worker" {
		if err := mountUI(a, o.Clock); err != nil {
			a.Close()
			return nil, err
		}
	}
	return a, nil
}

// ProcessorClient is the HTTP client the processors of a process share,
// for stages running up to concurrency extractions at once:
// http.DefaultTransport's settings, but keeping an idle connection per host
// for every call the stages can have in flight (the extractions and the
// batch workers). The default transport keeps two, so with more calls at
// once every one past two opened a new connection (and, to a provider, a
// new TLS handshake) and closed it after its answer.
func ProcessorClient(concurrency int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = max(concurrency+pipeline.BatchWorkers, 2)
	tr.MaxIdleConns = max(tr.MaxIdleConns, tr.MaxIdleConnsPerHost)
	return &http.Client{Transport: tr}
}

// NewProcessor builds a processor from its config, sending through hc (nil:
// the processor's own client); nil for kinds this build does not have yet
// (their jobs are blocked, never re-routed). Wiring a kind is one case: the shared settings
// are built once, as processor.Common.
func NewProcessor(pc *config.Processor, cfg *config.Config, hc *http.Client) (stet.Processor, error) {
	c := processor.Common{
		ID: pc.ID, BaseURL: pc.BaseURL, APIKey: pc.APIKey, Model: pc.Model, Region: pc.Region,
		Retention: pc.Retention, ZeroRetention: pc.ZeroRetention.Value, Subprocessors: pc.Subprocessors.List, Pending: pc.PendingAnswers(),
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

// NewTranscriber builds a transcriber from its config (docs/design.md
// §19), sending through hc (nil: its own client). A pocketsphinx
// transcriber whose recognizer or model is missing is an error naming the
// command that installs them.
func NewTranscriber(tc *config.Processor, hc *http.Client) (transcribe.Transcriber, error) {
	switch tc.Kind {
	case config.KindPocketsphinx:
		return pocketsphinx.New(pocketsphinx.Config{ID: tc.ID, Timeout: tc.Timeout.Std()})
	case config.KindOpenAITranscribe:
		c := processor.Common{
			ID: tc.ID, BaseURL: tc.BaseURL, APIKey: tc.APIKey, Model: tc.Model, Region: tc.Region,
			Retention: tc.Retention, ZeroRetention: tc.ZeroRetention.Value, Subprocessors: tc.Subprocessors.List, Pending: tc.PendingAnswers(),
			Timeout: tc.Timeout.Std(), HTTPClient: hc,
		}
		return openai.NewTranscriber(openai.TranscriberConfig{Config: openai.Config{Common: c, AzureAPIVersion: tc.APIVersion}})
	}
	return nil, fmt.Errorf("transcriber %s: kind %q is not in this build", tc.ID, tc.Kind)
}

// Migrate applies the ledger's and River's migrations.
func Migrate(ctx context.Context, db *ledger.DB) error {
	if _, err := db.Migrate(ctx); err != nil {
		return fmt.Errorf("migrate ledger: %w", err)
	}
	if err := pipeline.Migrate(ctx, db); err != nil {
		return err
	}
	return nil
}

// Close flushes the trace exporter, closes the ledger and releases the
// SQLite lock.
func (a *App) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := a.stopTracing(ctx); err != nil {
		a.Log.Warn("trace exporter did not flush", "err", err)
	}
	cancel()
	if a.DB != nil {
		a.DB.Close()
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

// Sources builds the intake's sources from the config: intake and stet
// import accept through them.
func Sources(cfg *config.Config, clock stet.Clock) ([]*api.Source, error) {
	var sources []*api.Source
	for i := range cfg.Sources {
		s := &cfg.Sources[i]
		var v *webhook.Verifier
		if len(s.Secrets) > 0 { // an operator command (stet import) loads no secrets and verifies nothing
			var err error
			if v, err = webhook.NewVerifier(s.Secrets, clock); err != nil {
				return nil, fmt.Errorf("source %s: %w", s.ID, err)
			}
		}
		prof := cfg.Profile(s.Profile)
		pol := cfg.Policy(s.Policy).Domain()
		sources = append(sources, &api.Source{
			ID: s.ID, Tenant: s.Tenant, Identity: s.Identity, Revisions: s.Revisions, Verifier: v, Mode: s.Mode,
			Audio: s.AcceptsAudio(), AudioBodyLimit: int64(s.AudioBodyLimit),
			PolicyID: pol.ID, PolicyHash: pol.Hash(), ProfileID: prof.ID, ProfileVersion: prof.Version, Schema: prof.Validator,
		})
	}
	return sources, nil
}

// Source is the intake source id of the config, as Sources builds it; nil
// when the config has none of that ID.
func Source(cfg *config.Config, id string, clock stet.Clock) (*api.Source, error) {
	sources, err := Sources(cfg, clock)
	if err != nil {
		return nil, err
	}
	for _, s := range sources {
		if s.ID == id {
			return s, nil
		}
	}
	return nil, nil
}
