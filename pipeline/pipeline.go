// Package pipeline runs stet's stages on River: intake (group commit),
// extract and commit. River claims, retries, snoozes and rescues; the ledger
// is the memo of every stage result, and every stage result commits in one
// transaction with the enqueue of the next stage (InsertTx, JobCompleteTx).
//
// The pipeline never calls a processor inside a transaction, never sends text
// to a processor the job's recorded policy does not permit, and never logs
// text: River job args carry IDs only.
package pipeline

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"text/template"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/admission"
	"github.com/stetlabs/stet/boundary"
	"github.com/stetlabs/stet/governance"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/metrics"
	"github.com/stetlabs/stet/monitor"
	"github.com/stetlabs/stet/outbound"
	"github.com/stetlabs/stet/processor/transcribe"
	"github.com/stetlabs/stet/schema"
)

// Queue names. The record stage's queue and job kind keep the names they
// were first stored under ("commit", "stet_commit"): River's rows carry
// them, and a ledger upgraded in place still holds such jobs.
const (
	QueueExtract = "extract"
	QueueRecord  = "commit"
)

// Profile is a profile ready to use: schema compiled, prompt parsed.
type Profile struct {
	stet.Profile
	Validator *schema.Schema
	Template  *template.Template
	// dataTags are the tags the prompt wraps the document in ("post"):
	// prepare neutralises them in the text (prompt.go).
	dataTags []string
	// Parts are the profiles of its parts, in config order (a profile
	// with parts, docs/design.md §16): each asks for its fields'
	// sub-schema. A part's profile has none.
	Parts []*Profile
	// Processors, for a part's profile, are the processors its part may
	// go to, first the primary; empty: the source's policy's.
	Processors []string
	// fields are the top-level fields the profile asks for, in schema
	// order: a part's own, or (with parts) the whole schema's.
	fields []string
	// wire is the schema a processor is sent: the profile's without the
	// rules relating its fields to each other (if/then, allOf,
	// dependentRequired, …), which strict structured-output modes refuse.
	// The output is validated against the whole schema all the same, and
	// a repair quotes the validator's messages.
	wire json.RawMessage
}

// NewProfile compiles a profile's schema and prompt, and those of its
// parts.
func NewProfile(p stet.Profile) (*Profile, error) {
	pr, err := compileProfile(p)
	if err != nil {
		return nil, err
	}
	if pr.fields, err = schema.Properties(p.Schema); err != nil {
		return nil, fmt.Errorf("profile %s: %w", p.ID, err)
	}
	if len(pr.fields) > 0 {
		if pr.wire, err = schema.Sub(p.Schema, pr.fields); err != nil {
			return nil, fmt.Errorf("profile %s: %w", p.ID, err)
		}
	}
	for _, part := range p.Parts {
		sub, err := schema.Sub(p.Schema, part.Fields)
		if err != nil {
			return nil, fmt.Errorf("profile %s: part %s: %w", p.ID, part.ID, err)
		}
		pp, err := compileProfile(stet.Profile{ID: p.ID, Version: p.Version, Schema: sub, Prompt: p.Prompt, Part: part.ID})
		if err != nil {
			return nil, err
		}
		pp.Processors, pp.fields, pp.wire = part.Processors, part.Fields, sub
		pr.Parts = append(pr.Parts, pp)
	}
	return pr, nil
}

func compileProfile(p stet.Profile) (*Profile, error) {
	v, err := schema.Compile(p.SchemaName(), p.Schema)
	if err != nil {
		return nil, fmt.Errorf("profile %s: %w", p.ID, err)
	}
	t, err := template.New(p.ID).Option("missingkey=error").Parse(p.Prompt)
	if err != nil {
		return nil, fmt.Errorf("profile %s: prompt: %w", p.ID, err)
	}
	return &Profile{Profile: p, Validator: v, Template: t, dataTags: dataTags(t), wire: p.Schema}, nil
}

// Config wires a pipeline.
type Config struct {
	DB         *ledger.DB
	Processors map[string]stet.Processor // by processor ID
	// Transcribers turn audio reports into text (docs/design.md §19), by
	// transcriber ID; their limits are in Limits too.
	Transcribers map[string]transcribe.Transcriber
	// Limits are each processor's configured provider limits (absent or
	// zero: unlimited). Processes sharing a database split them by worker
	// heartbeats.
	Limits map[string]admission.Limits
	// Batch tunes each batch-capable processor's batches (absent: defaults).
	Batch map[string]BatchSettings
	// AssembleEvery is how often the assembler looks for batch-mode jobs;
	// default 5s.
	AssembleEvery time.Duration
	// InvariantsEvery is how often the leader checks the invariants and
	// raises alerts; default 1m. SLA (default 1h) and PauseLimit (default
	// 1h) tune invariants 1 and 7.
	InvariantsEvery time.Duration
	SLA             time.Duration
	PauseLimit      time.Duration
	Profiles        []*Profile
	Policies        []*stet.Policy // the policies in force now
	// Prices are the processors' prices (absent: no price); Budgets their
	// day budgets in USD (absent or zero: no cap). docs/design.md §18.
	Prices  map[string]ledger.Price
	Budgets map[string]float64
	Logger  *slog.Logger
	Metrics *metrics.Metrics
	Clock   stet.Clock
	// TracerProvider makes the pipeline's spans (stage jobs, processor
	// calls, ledger transactions); nil traces nothing.
	TracerProvider trace.TracerProvider

	Concurrency int           // extract attempts at once; default 8
	JobTimeout  time.Duration // one stage attempt; default 2m
	RescueAfter time.Duration // default 5m
	// Heartbeat is how often a worker process writes its heartbeat and
	// runs the liveness sweep; default 2s. DeadAfter is how old a
	// heartbeat may get before its process is dead and its leases are
	// taken over; default 4 × Heartbeat.
	Heartbeat    time.Duration
	DeadAfter    time.Duration
	MaxAttempts  int // transient attempts before manual; default 5
	RepairBudget int // invalid-output repairs per attempt; default 2
	// RetryBase is the first transient retry delay; it doubles per attempt,
	// with jitter, capped at RetryMax. Defaults 1s and 5m.
	RetryBase time.Duration
	RetryMax  time.Duration
	// PollInterval is how often River looks for new work when nothing
	// signals it; default 1s (lower in tests and benchmarks).
	PollInterval time.Duration
	// PausedRecheck is how long a job waits before it looks again at a
	// dispatch pause; default 10s.
	PausedRecheck time.Duration
	// SweepInterval is how often the leader's retention sweeper runs;
	// default 1m. SweepBatch rows are purged per transaction (default 500),
	// at most SweepBatches transactions per kind and run (default 20).
	SweepInterval time.Duration
	SweepBatch    int
	SweepBatches  int
	// Encryption says the ledger seals text under per-report data keys
	// (encryption: in config). Off, a deletion's encryption_key task is done
	// with the reason "encryption off".
	Encryption bool
	// Work says whether this process runs stage workers (role worker|all).
	Work bool
	// Destinations are the sources' outbound webhooks and the alert
	// webhook (docs/design.md §6, §13). DeliverEvery is how often the delivery
	// sweep runs (default 1s); DeliverTimeout bounds one POST (default
	// 10s); a destination's backoff after failures starts at
	// DeliverRetryBase (default 1s) and doubles up to DeliverRetryMax
	// (default 10m), unless the receiver asks for a longer Retry-After.
	Destinations     []outbound.Destination
	DeliverEvery     time.Duration
	DeliverTimeout   time.Duration
	DeliverRetryBase time.Duration
	DeliverRetryMax  time.Duration
	// SingleProcess says this process is alone on its database (the
	// embedded SQLite default, held by a lock file): at start, stages left
	// running by a crash are resumed at once instead of after River's rescue.
	SingleProcess bool
}

// Pipeline is River plus stet's stage workers.
type Pipeline struct {
	cfg      Config
	db       *ledger.DB
	river    *river.Client[*sql.Tx]
	log      *slog.Logger
	clock    stet.Clock
	tracer   trace.Tracer
	profiles map[string]*Profile // by extraction version
	policies map[string]*stet.Policy
	intake   *intake
	grouper  *stageGrouper // the extract stage's group commit (stagegroup.go)
	gov      *governance.Governance
	monitor  *monitor.Monitor

	mu          sync.Mutex
	minimizers  map[string]*boundary.Minimizer // by policy hash
	oldPolicies map[string]*stet.Policy        // by hash, recorded versions

	deliverer *outbound.Deliverer

	limiters  map[string]*admission.Limiter // by processor ID; every processor has one
	budget    budgets                       // day spend and calls in flight (budget.go)
	stopping  atomic.Bool                   // Stop was called: a cancelled stage releases its job
	processID string                        // this process's worker heartbeat
	stopBeat  chan struct{}
	beatDone  chan struct{}
	// The dispatch pause's sync with River's extract queue (pausequeue.go).
	stopPause chan struct{}
	pauseDone chan struct{}
}

// Migrate applies River's migrations on db, under the ledger's migration
// lock.
func Migrate(ctx context.Context, db *ledger.DB) error {
	return db.WithMigrationLock(ctx, func() error {
		m, err := rivermigrate.New(db.RiverDriver(), nil)
		if err != nil {
			return fmt.Errorf("river migrate: %w", err)
		}
		if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
			return fmt.Errorf("river migrate: %w", err)
		}
		return nil
	})
}

// New builds a pipeline. It does not start workers: call Start.
func New(cfg Config) (*Pipeline, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = stet.SystemClock{}
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New(nil, nil)
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = tracenoop.NewTracerProvider()
	}
	setDefault(&cfg.Concurrency, 8)
	setDefault(&cfg.JobTimeout, 2*time.Minute)
	setDefault(&cfg.RescueAfter, 5*time.Minute)
	setDefault(&cfg.Heartbeat, DefaultHeartbeat)
	setDefault(&cfg.DeadAfter, 4*cfg.Heartbeat)
	setDefault(&cfg.MaxAttempts, 5)
	setDefault(&cfg.RepairBudget, 2)
	setDefault(&cfg.RetryBase, time.Second)
	setDefault(&cfg.RetryMax, 5*time.Minute)
	setDefault(&cfg.PollInterval, time.Second)
	setDefault(&cfg.PausedRecheck, 10*time.Second)
	setDefault(&cfg.AssembleEvery, 5*time.Second)
	setDefault(&cfg.InvariantsEvery, time.Minute)
	setDefault(&cfg.SLA, time.Hour)
	setDefault(&cfg.PauseLimit, time.Hour)
	setDefault(&cfg.SweepInterval, time.Minute)
	setDefault(&cfg.SweepBatch, 500)
	setDefault(&cfg.SweepBatches, 20)
	setDefault(&cfg.DeliverEvery, time.Second)
	setDefault(&cfg.DeliverTimeout, outbound.DefaultTimeout)
	setDefault(&cfg.DeliverRetryBase, time.Second)
	setDefault(&cfg.DeliverRetryMax, 10*time.Minute)
	p := &Pipeline{
		cfg: cfg, db: cfg.DB, log: cfg.Logger, clock: cfg.Clock, tracer: cfg.TracerProvider.Tracer(tracerName),
		profiles: map[string]*Profile{}, policies: map[string]*stet.Policy{},
		minimizers: map[string]*boundary.Minimizer{}, oldPolicies: map[string]*stet.Policy{},
	}
	for _, pr := range cfg.Profiles {
		p.profiles[pr.ExtractionVersion()] = pr
		for _, part := range pr.Parts {
			p.profiles[part.ExtractionVersion()] = part
		}
	}
	cfg.DB.SetMergeParts(p.mergeParts)
	p.deliverer = outbound.NewDeliverer(outbound.DelivererConfig{DB: cfg.DB, Clock: cfg.Clock, Log: cfg.Logger, Metrics: cfg.Metrics,
		Destinations: cfg.Destinations, Timeout: cfg.DeliverTimeout, RetryBase: cfg.DeliverRetryBase, RetryMax: cfg.DeliverRetryMax,
		Alert: p.alert})
	p.limiters = map[string]*admission.Limiter{}
	for id := range cfg.Processors {
		p.limiters[id] = admission.New(cfg.Limits[id], cfg.Clock)
	}
	for id := range cfg.Transcribers {
		p.limiters[id] = admission.New(cfg.Limits[id], cfg.Clock)
	}
	p.processID = stet.NewID("proc", cfg.Clock.Now())
	for _, pol := range cfg.Policies {
		p.policies[pol.ID] = pol
	}

	workers := river.NewWorkers()
	river.AddWorker(workers, &extractWorker{p: p})
	river.AddWorker(workers, &recordWorker{p: p})
	river.AddWorker(workers, &batchWorker{p: p})
	river.AddWorker(workers, &assembleWorker{p: p})
	transcribers := map[string]stet.ProcessorInfo{}
	for id, t := range cfg.Transcribers {
		transcribers[id] = t.Info()
	}
	p.gov = governance.New(governance.Config{DB: cfg.DB, Clock: cfg.Clock, Log: cfg.Logger, Processors: cfg.Processors, Transcribers: transcribers,
		Encryption: cfg.Encryption, JobTimeout: cfg.JobTimeout, SweepInterval: cfg.SweepInterval,
		SweepBatch: cfg.SweepBatch, SweepBatches: cfg.SweepBatches, Backoff: p.backoff})
	p.gov.Register(workers)
	p.monitor = monitor.New(monitor.Config{DB: cfg.DB, Metrics: cfg.Metrics, Log: cfg.Logger, Clock: cfg.Clock,
		Every: cfg.InvariantsEvery, SLA: cfg.SLA, PauseLimit: cfg.PauseLimit})
	p.monitor.Register(workers)
	p.deliverer.Register(workers)
	rc := &river.Config{
		// River's client ID is the heartbeat's process ID: a running River
		// job's attempted_by then names the process working it, and the
		// liveness sweep re-enqueues a dead process's stages.
		ID:                   p.processID,
		Logger:               cfg.Logger.With("component", "river"),
		Workers:              workers,
		JobTimeout:           cfg.JobTimeout,
		RescueStuckJobsAfter: cfg.RescueAfter,
		FetchPollInterval:    cfg.PollInterval,
		FetchCooldown:        min(cfg.PollInterval, fetchCooldown), // rivercosts.go
		MaxAttempts:          maxRiverAttempts,
		// traceContext first: otelriver's work span is then a child of
		// the span that enqueued the job. otelriver's own propagation
		// stays off (it would link, not parent, and overwrite intake's
		// per-delivery traceparent); its metrics go nowhere (Prometheus
		// is stet's metrics).
		Middleware: []rivertype.Middleware{&traceContext{}, otelriver.NewMiddleware(&otelriver.MiddlewareConfig{
			TracerProvider: cfg.TracerProvider, MeterProvider: metricnoop.NewMeterProvider(),
			EnableWorkSpanJobKindSuffix: true,
		})},
		// rivercosts.go says why.
		CompletedJobRetentionPeriod: completedJobRetention,
	}
	if cfg.Work {
		rc.PeriodicJobs = []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(cfg.AssembleEvery),
			func() (river.JobArgs, *river.InsertOpts) { return AssembleArgs{}, nil },
			&river.PeriodicJobOpts{RunOnStart: true})}
		rc.PeriodicJobs = append(rc.PeriodicJobs, p.monitor.PeriodicJobs()...)
		rc.PeriodicJobs = append(rc.PeriodicJobs, p.gov.PeriodicJobs()...)
		side := SideQueuePoll(cfg.PollInterval) // rivercosts.go
		rc.Queues = map[string]river.QueueConfig{
			QueueExtract: {MaxWorkers: cfg.Concurrency},
			// commits are short transactions
			QueueRecord: {MaxWorkers: max(4, cfg.Concurrency), FetchPollInterval: side},
			QueueBatch:  {MaxWorkers: BatchWorkers, FetchPollInterval: side},
		}
		if len(cfg.Destinations) > 0 {
			// A sweep already sends to every destination in parallel.
			rc.Queues[outbound.QueueDeliver] = river.QueueConfig{MaxWorkers: 2, FetchPollInterval: side}
			rc.PeriodicJobs = append(rc.PeriodicJobs, p.deliverer.PeriodicJobs(cfg.DeliverEvery)...)
		}
	}
	client, err := river.NewClient(cfg.DB.RiverDriver(), rc)
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	p.river = client
	p.gov.Use(client)
	p.intake = newIntake(p)
	p.grouper = newStageGrouper(p)
	return p, nil
}

// maxRiverAttempts bounds River's own retries of one stage job. The extract
// stage counts transient failures in the ledger (MaxAttempts) and writes a
// manual record before River would give up; this is the backstop.
const maxRiverAttempts = 25

func setDefault[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

// Start records the policies in force and starts River (and intake's group
// committer).
func (p *Pipeline) Start(ctx context.Context) error {
	for _, pol := range p.cfg.Policies {
		if err := ledger.RecordPolicy(ctx, p.db.Writer(), pol, p.clock.Now()); err != nil {
			return err
		}
	}
	if err := p.db.SyncDestinations(ctx, outbound.DestinationSpecs(p.cfg.Destinations), p.clock.Now()); err != nil {
		return err
	}
	if err := p.db.RecordPrices(ctx, p.cfg.Prices, p.clock.Now()); err != nil {
		return err
	}
	p.intake.start()
	if !p.cfg.Work {
		return nil // an api process: River only inserts
	}
	if _, err := p.heartbeat(ctx); err != nil {
		return err
	}
	p.stopBeat, p.beatDone = make(chan struct{}), make(chan struct{})
	go p.beatLoop()
	if p.cfg.SingleProcess {
		n, err := p.recoverOrphans(ctx)
		if err != nil {
			return err
		}
		if n > 0 {
			p.log.Warn("resumed stages left running by a previous process", "count", n)
		}
	}
	// Take over at once what workers that died before we started held;
	// the beat loop does it again on every tick that finds a silent one.
	if _, err := p.takeOverDead(ctx); err != nil {
		p.log.Warn("liveness sweep failed", "err", err)
	}
	p.grouper.start()
	if err := p.river.Start(ctx); err != nil {
		p.grouper.stop()
		return fmt.Errorf("start river: %w", err)
	}
	p.stopPause, p.pauseDone = make(chan struct{}), make(chan struct{})
	go p.pauseLoop(p.stopPause, p.pauseDone)
	return nil
}

// Stop stops taking work and waits for running stages to finish. When ctx
// ends first, running stages are cancelled: each records its attempt and
// releases its job (no lease is left held), and River retries it later.
func (p *Pipeline) Stop(ctx context.Context) error {
	var err error
	if p.cfg.Work {
		p.stopping.Store(true)
		if p.stopPause != nil {
			close(p.stopPause)
			<-p.pauseDone
		}
		err = p.river.Stop(ctx)
		if err != nil && ctx.Err() != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
			err = p.river.StopAndCancel(cctx)
			cancel()
		}
		// No stage runs now: nothing waits for a group.
		p.grouper.stop()
		if p.stopBeat != nil {
			close(p.stopBeat)
			<-p.beatDone
			_ = p.db.Unregister(context.WithoutCancel(ctx), p.processID)
		}
	}
	p.intake.stop()
	return err
}

// River returns the River client, for tests and operator commands.
func (p *Pipeline) River() *river.Client[*sql.Tx] { return p.river }

// Governance returns the data lifecycle's calls (deletion, the retention
// sweep), whose workers run on this pipeline's River client.
func (p *Pipeline) Governance() *governance.Governance { return p.gov }

// Monitor returns the invariant monitor that runs on the pipeline's River
// client.
func (p *Pipeline) Monitor() *monitor.Monitor { return p.monitor }

// BatchWorkers is how many batch-queue jobs (batch runs, the assembler,
// the sweeps) a worker process runs at once.
const BatchWorkers = 4

// DefaultHeartbeat is how often a worker writes its heartbeat
// (workers.heartbeat); a worker silent for DeadAfter (workers.dead_after,
// default 4 heartbeats) is dead: it no longer counts toward the shares, and
// its leases are taken over.
const DefaultHeartbeat = 2 * time.Second

// heartbeat records this worker as alive and sets every limiter's share to
// 1/N of the configured limits, N being the live workers on the database. It
// returns how many other workers have been silent for DeadAfter: the ones a
// liveness sweep takes over.
func (p *Pipeline) heartbeat(ctx context.Context) (silent int, err error) {
	if p.cfg.SingleProcess {
		// The only worker there can be: its share is the whole limit.
		return 0, p.db.HeartbeatAlone(ctx, p.processID, p.clock.Now())
	}
	n, silent, err := p.db.Heartbeat(ctx, p.processID, p.clock.Now(), p.cfg.DeadAfter)
	if err != nil {
		return 0, err
	}
	for _, l := range p.limiters {
		l.SetShare(1 / float64(n))
	}
	return silent, nil
}

func (p *Pipeline) beatLoop() {
	defer close(p.beatDone)
	t := time.NewTicker(p.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-p.stopBeat:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), max(p.cfg.Heartbeat, p.cfg.DeadAfter/2))
			// Alone on the database (SingleProcess), no other worker can
			// die, and what an earlier process left was taken back at
			// start: there is no sweep to run. Otherwise the sweep's
			// transaction runs only when the beat saw a silent worker: an
			// idle fleet's beat is one statement.
			if silent, err := p.heartbeat(ctx); err != nil {
				p.log.Warn("worker heartbeat failed; keeping the last share", "err", err)
			} else if silent > 0 {
				if _, err := p.takeOverDead(ctx); err != nil {
					p.log.Warn("liveness sweep failed", "err", err)
				}
			}
			cancel()
		}
	}
}

// ExtractArgs is the extract stage's job: IDs only.
type ExtractArgs struct {
	JobID string `json:"job_id"`
}

// Kind implements river.JobArgs.
func (ExtractArgs) Kind() string { return "stet_extract" }

// InsertOpts implements river.JobArgsWithInsertOpts. Stage jobs are not
// River-unique: a second River job for one ledger job (an operator's resume
// while a worker is stalled) is harmless, because every stage fences on the
// ledger's attempt token.
func (ExtractArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueExtract, Priority: priorityStage}
}

// River fetches by priority first (1 before 2), then by schedule. The
// extract and commit queues hold stage jobs only, at priorityStage; a stage
// taken back from a dead worker is enqueued again at priorityResumed, so
// that it runs next instead of behind the whole backlog queued since it was
// first claimed. (Batch jobs share their queue with the maintenance jobs
// and keep River's default.)
const (
	priorityResumed = 1
	priorityStage   = 2
)

// resumedOpts are the insert options of a stage enqueued again after a
// death: ahead of the backlog in the extract and commit queues.
func resumedOpts(args river.JobArgs) *river.InsertOpts {
	switch args.(type) {
	case ExtractArgs, RecordArgs:
		return &river.InsertOpts{Priority: priorityResumed}
	}
	return nil
}

// RecordArgs is the record stage's job (it writes the review record from
// the saved artifact): IDs only.
type RecordArgs struct {
	JobID string `json:"job_id"`
}

// Kind implements river.JobArgs.
func (RecordArgs) Kind() string { return "stet_commit" }

// InsertOpts implements river.JobArgsWithInsertOpts.
func (RecordArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueRecord, Priority: priorityStage}
}

// completeFinal reports whether a stage that has just finished its ledger
// job for good (the review record committed, no next stage enqueued) should
// complete its River job inside its transaction. On SQLite it does: the
// completion is a cheap statement in the group. On PostgreSQL it does not:
// River's JobCompleteTx there is its JobSetStateIfRunningMany statement for
// one job, 0.74 ms of server time per call measured with
// pg_stat_statements (more than the whole stage result, 0.56 ms), where
// River's completer, when Work returns, completes the jobs of many workers
// in one such statement (1.9 ms for about a hundred). What must be atomic
// stays so: the stage transition and any next stage's enqueue share the
// transaction. A River job a crash leaves running is rescued (the liveness
// sweep, or the restart's resume) and finds its ledger job committed: it
// does nothing and calls no processor.
func (p *Pipeline) completeFinal() bool { return p.db.OneWriter() }

// completeTx completes a River job inside tx. A job that is no longer
// running (a stale execution completed or snoozed it) is fine: the ledger,
// not River, is the record of what happened.
func completeTx[T river.JobArgs](ctx context.Context, tx *sql.Tx, job *river.Job[T]) error {
	if _, err := river.JobCompleteTx[*riversqlite.Driver](ctx, tx, job); err != nil && !errors.Is(err, rivertype.ErrNotFound) {
		return fmt.Errorf("complete river job: %w", err)
	}
	return nil
}

// Resume re-enqueues a job from its last durable stage: commit if its
// artifact exists, extraction if it has none and is not finished. It never
// rewrites a finished job. It returns the stage enqueued.
func (p *Pipeline) Resume(ctx context.Context, jobID string) (string, error) {
	var stage, tenant string
	err := p.inTx(ctx, "resume", func(ctx context.Context, tx *sql.Tx) error {
		w, err := p.db.LoadWork(ctx, tx, jobID)
		if err != nil {
			return err
		}
		tenant = w.Job.TenantID
		switch w.Job.State {
		case stet.JobCommitted, stet.JobManual, stet.JobCancelled:
			return stet.Errorf(stet.EConflict, "job %s is %s: nothing to resume", jobID, w.Job.State)
		case stet.JobExtracted:
			stage = "commit"
			_, err := p.river.InsertTx(ctx, tx, RecordArgs{JobID: jobID}, nil)
			return err
		case stet.JobBlocked:
			if err := ledger.Unblock(ctx, tx, jobID, p.clock.Now()); err != nil {
				return err
			}
			fallthrough
		case stet.JobAccepted, stet.JobWaiting, stet.JobExtracting, stet.JobBatched:
			stage = "extract"
			_, err := p.river.InsertTx(ctx, tx, ExtractArgs{JobID: jobID}, nil)
			return err
		default:
			return fmt.Errorf("job %s: unknown state %q", jobID, w.Job.State)
		}
	})
	if err != nil {
		return "", err
	}
	if err := ledger.Audit(ctx, p.db.Writer(), ledger.AuditEntry{Tenant: tenant, Actor: "cli", Action: "job.resume." + stage,
		ObjectType: "job", ObjectID: jobID, Now: p.clock.Now()}); err != nil {
		return stage, err
	}
	return stage, nil
}
