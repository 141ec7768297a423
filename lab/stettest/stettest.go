// Package stettest runs a whole stet in-process for tests: a real SQLite
// ledger in a temporary folder, River, the pipeline, the HTTP API on a local
// listener, and the wire-faithful OpenAI fake as the processor. Nothing is
// mocked: tests speak HTTP to the API and count rows and provider calls.
package stettest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/admission"
	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/internal/stetclient"
	"github.com/stetlabs/stet/lab/testdb"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/metrics"
	"github.com/stetlabs/stet/outbound"
	"github.com/stetlabs/stet/pipeline"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/openai"
	"github.com/stetlabs/stet/processor/openai/openaifake"
	"github.com/stetlabs/stet/processor/rules"
	"github.com/stetlabs/stet/schema"
	"github.com/stetlabs/stet/seal"
	"github.com/stetlabs/stet/webhook"
)

// Sources every Env serves, one per identity/revision combination.
const (
	SourceReports = "reports" // identity external_id, revisions explicit
	SourceBlobs   = "blobs"   // identity content, revisions content
	SourceNotes   = "notes"   // identity external_id, revisions content
	SourceOther   = "other-tenant-reports"
	SourceBatch   = "batch-reports" // like reports, dispatched through provider batches
	// SourceVoice is like reports, and also takes audio reports, bodies up
	// to VoiceBodyLimit.
	SourceVoice = "voice-notes"
)

// VoiceBodyLimit is SourceVoice's audio_body_limit.
const VoiceBodyLimit = 16 << 10

// Secret is every source's webhook secret.
var Secret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("stettest-secret-0123456789abcdef"))

// Tokens of the test tenants.
const (
	ReaderToken   = "tok-reader"
	ReviewerToken = "tok-reviewer"
	OperatorToken = "tok-operator"
	OtherToken    = "tok-other-tenant"
	AdminToken    = "tok-admin-root-ops" // the admin "root-ops" (config admins:)
)

// Options tunes an Env.
type Options struct {
	// Clock, if set, drives the ledger, the leases and signature checks.
	Clock *stet.ManualClock
	// FakeOptions configure the OpenAI fake that is the policy's processor.
	FakeOptions openaifake.Options
	// ProcessorTimeout bounds one processor call; default 5s.
	ProcessorTimeout time.Duration
	// MaxAttempts is the transient budget; default 3.
	MaxAttempts int
	// JobTimeout is the stage timeout; default 10s.
	JobTimeout time.Duration
	// PolicyProcessors are the processors the policy permits at
	// acceptance; default ["openai-fake"]. "rules" is also configured.
	PolicyProcessors []string
	// BodyLimit for intake; default 1 MiB.
	BodyLimit int64
	// NoWorkers runs the API alone (no stage workers).
	NoWorkers bool
	// Limits are the OpenAI fake processor's configured provider limits.
	Limits admission.Limits
	// Destinations are outbound webhooks (docs/design.md §13) and the alert
	// webhook; the sweep runs every 50ms and backs off from 20ms to 200ms.
	Destinations []outbound.Destination
	// Batch tunes the OpenAI fake processor's batches; zero values take
	// test defaults (max_wait 100ms, poll_first 50ms, poll_max 200ms).
	Batch pipeline.BatchSettings
	// IntakeLimits are per-tenant intake quotas ("demo", "other").
	IntakeLimits map[string]api.IntakeLimit
	// Schema, if set, replaces the quickstart profile's JSON Schema.
	Schema []byte
	// MountUI, if set, is called with each API built, before it serves:
	// the review UI's tests mount the UI there.
	MountUI func(e *Env, s *api.Server)
	// EditPolicy, if set, changes the policy of acceptance before the
	// pipeline starts (retention, replay horizon).
	EditPolicy func(*stet.Policy)
	// WrapProcessor, if set, replaces each processor by what it returns
	// (a test double adding stet.CopyDeleter, say); fakeURL is the OpenAI
	// fake's base URL.
	WrapProcessor func(id string, p stet.Processor, fakeURL string) stet.Processor
	// SweepInterval is the retention sweeper's period; default 1h, so a
	// test runs Pipeline.Sweep itself, on its clock.
	SweepInterval time.Duration
	// Keyring, if set, turns on encryption at rest (the ledger seals text
	// under per-report data keys).
	Keyring *seal.Keyring
	// TracerProvider, if set, traces the pipeline and the API.
	TracerProvider trace.TracerProvider
}

// Env is a running in-process stet.
type Env struct {
	t        T
	Dir      string
	URL      string // the ledger's database URL
	DB       *ledger.DB
	Pipeline *pipeline.Pipeline
	API      *api.Server
	Server   *httptest.Server
	Fake     *openaifake.Server
	Metrics  *metrics.Metrics
	Clock    stet.Clock
	Logs     *SyncBuffer
	Policy   *stet.Policy
	opts     Options
	profile  *pipeline.Profile
	procs    map[string]stet.Processor
}

// SyncBuffer is a bytes.Buffer safe for concurrent writes.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// RepoRoot returns the repository's root folder.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// QuickstartProfile returns the quickstart's moderation profile.
func QuickstartProfile(t T) stet.Profile {
	dir := filepath.Join(RepoRoot(), "examples", "quickstart", "profiles")
	sch, err := os.ReadFile(filepath.Join(dir, "moderation.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	prompt, err := os.ReadFile(filepath.Join(dir, "moderation.prompt.tmpl"))
	if err != nil {
		t.Fatal(err)
	}
	return stet.Profile{ID: "moderation", Version: 1, Schema: sch, Prompt: string(prompt)}
}

// T is what an Env needs of its test: *testing.T and *testing.B have it,
// and so does the runner of stetlab drill (lab/drill/recovery), which
// runs the same drills outside go test.
type T interface {
	testdb.T
	Errorf(format string, args ...any)
	Logf(format string, args ...any)
}

// New starts an Env and stops it when the test ends.
func New(t T, opts Options) *Env {
	t.Helper()
	if opts.ProcessorTimeout == 0 {
		opts.ProcessorTimeout = 5 * time.Second
	}
	if opts.MaxAttempts == 0 {
		opts.MaxAttempts = 3
	}
	if opts.JobTimeout == 0 {
		opts.JobTimeout = 10 * time.Second
	}
	if len(opts.PolicyProcessors) == 0 {
		opts.PolicyProcessors = []string{"openai-fake"}
	}
	e := &Env{t: t, Dir: t.TempDir(), Logs: &SyncBuffer{}, opts: opts}
	if opts.Clock != nil {
		e.Clock = opts.Clock
	} else {
		e.Clock = stet.SystemClock{}
	}
	ctx := context.Background()
	// PostgreSQL when STET_TEST_DATABASE_URL is set (a fresh schema per
	// test), else a SQLite file in the test's folder.
	e.URL = testdb.URL(t, testdb.Default())
	db, err := ledger.Open(ctx, e.URL)
	if err != nil {
		t.Fatal(err)
	}
	e.DB = db
	if _, err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if opts.Keyring != nil {
		db.UseKeyring(opts.Keyring)
	}
	if err := db.CheckKeys(ctx, e.Clock.Now()); err != nil {
		t.Fatal(err)
	}
	if err := pipeline.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewJSONHandler(e.Logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e.Metrics = metrics.New(db, log)

	e.Fake = openaifake.New(opts.FakeOptions)
	oc, err := openai.New(openai.Config{Common: processor.Common{ID: "openai-fake", BaseURL: e.Fake.URL(), APIKey: "sk-test", Model: "gpt-test", Region: "us", Retention: "30d", Timeout: opts.ProcessorTimeout}})
	if err != nil {
		t.Fatal(err)
	}
	rp, err := rules.New(rules.Params{ID: "rules", RulesPath: filepath.Join(RepoRoot(), "examples", "quickstart", "profiles", "moderation.rules.yaml")})
	if err != nil {
		t.Fatal(err)
	}
	e.procs = map[string]stet.Processor{"openai-fake": oc, "rules": rp}
	if opts.WrapProcessor != nil {
		for id, p := range e.procs {
			e.procs[id] = opts.WrapProcessor(id, p, e.Fake.URL())
		}
	}
	sp := QuickstartProfile(t)
	if opts.Schema != nil {
		sp.Schema = opts.Schema
	}
	prof, err := pipeline.NewProfile(sp)
	if err != nil {
		t.Fatal(err)
	}
	e.profile = prof
	e.Policy = &stet.Policy{ID: "standard", Processors: opts.PolicyProcessors,
		Minimize:      []stet.IdentifierClass{stet.IdentEmail, stet.IdentPhone, stet.IdentSSN, stet.IdentMRN, stet.IdentURL, stet.IdentIP},
		TextRetention: 30 * 24 * time.Hour, ArtifactRetention: 365 * 24 * time.Hour, ReplayHorizon: 90 * 24 * time.Hour}
	if opts.EditPolicy != nil {
		opts.EditPolicy(e.Policy)
	}
	if e.opts.SweepInterval == 0 {
		e.opts.SweepInterval = time.Hour
	}
	e.start(e.Policy)
	t.Cleanup(e.Close)
	return e
}

// start builds and starts the pipeline and API under policy (the policy in
// force now).
func (e *Env) start(policy *stet.Policy) {
	t := e.t
	log := slog.New(slog.NewJSONHandler(e.Logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p, err := pipeline.New(pipeline.Config{
		DB: e.DB, Processors: e.procs, Limits: map[string]admission.Limits{"openai-fake": e.opts.Limits},
		Profiles: []*pipeline.Profile{e.profile}, Policies: []*stet.Policy{policy},
		Logger: log, Metrics: e.Metrics, Clock: e.Clock,
		Concurrency: 4, JobTimeout: e.opts.JobTimeout, RescueAfter: e.opts.JobTimeout + 5*time.Second,
		MaxAttempts: e.opts.MaxAttempts, RetryBase: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		PollInterval: 50 * time.Millisecond, PausedRecheck: 100 * time.Millisecond, Work: !e.opts.NoWorkers,
		Batch: map[string]pipeline.BatchSettings{"openai-fake": e.batchSettings()}, AssembleEvery: 50 * time.Millisecond,
		InvariantsEvery: 100 * time.Millisecond, SweepInterval: e.opts.SweepInterval, TracerProvider: e.opts.TracerProvider,
		Encryption:   e.DB.Encrypted(),
		Destinations: e.opts.Destinations, DeliverEvery: 50 * time.Millisecond, DeliverTimeout: 2 * time.Second,
		DeliverRetryBase: 20 * time.Millisecond, DeliverRetryMax: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.Pipeline = p
	v, err := webhook.NewVerifier([]string{Secret}, e.Clock)
	if err != nil {
		t.Fatal(err)
	}
	src := func(id, tenant string, ident stet.IdentityMode, revs stet.RevisionMode) *api.Source {
		mode := stet.ModeSync
		if id == SourceBatch {
			mode = stet.ModeBatch
		}
		return &api.Source{ID: id, Tenant: tenant, Identity: ident, Revisions: revs, Verifier: v, Mode: mode,
			PolicyID: policy.ID, PolicyHash: policy.Hash(), ProfileID: "moderation", ProfileVersion: 1, Schema: e.profile.Validator}
	}
	e.API = api.New(api.Config{
		DB: e.DB, Acceptor: p, Manual: p, Rerouter: p, Deleter: p.Governance(), Logger: log, Metrics: e.Metrics, Clock: e.Clock, BodyLimit: e.opts.BodyLimit,
		Sources: []*api.Source{
			src(SourceReports, "demo", stet.IdentityExternalID, stet.RevisionsExplicit),
			src(SourceBlobs, "demo", stet.IdentityContent, stet.RevisionsContent),
			src(SourceNotes, "demo", stet.IdentityExternalID, stet.RevisionsContent),
			src(SourceOther, "other", stet.IdentityExternalID, stet.RevisionsExplicit),
			src(SourceBatch, "demo", stet.IdentityExternalID, stet.RevisionsExplicit),
			func() *api.Source {
				s := src(SourceVoice, "demo", stet.IdentityExternalID, stet.RevisionsExplicit)
				s.Audio, s.AudioBodyLimit = true, VoiceBodyLimit
				return s
			}(),
		},
		Tokens: []api.Token{
			{Name: "reader", Tenant: "demo", Role: stet.RoleReader, Value: ReaderToken},
			{Name: "reviewer", Tenant: "demo", Role: stet.RoleReviewer, Value: ReviewerToken},
			{Name: "operator", Tenant: "demo", Role: stet.RoleOperator, Value: OperatorToken},
			{Name: "other-operator", Tenant: "other", Role: stet.RoleOperator, Value: OtherToken},
		},
		Admins:         []api.Admin{{Name: "root-ops", Value: AdminToken}},
		IntakeLimits:   e.opts.IntakeLimits,
		TracerProvider: e.opts.TracerProvider,
	})
	if e.opts.MountUI != nil {
		e.opts.MountUI(e, e.API)
	}
	if e.Server == nil {
		// Every response is checked against the API's OpenAPI document.
		e.Server = httptest.NewServer(http.HandlerFunc(e.validating))
	}
}

func (e *Env) batchSettings() pipeline.BatchSettings {
	b := e.opts.Batch
	if b.MaxWait == 0 {
		b.MaxWait = 100 * time.Millisecond
	}
	if b.PollFirst == 0 {
		b.PollFirst = 50 * time.Millisecond
	}
	if b.PollMax == 0 {
		b.PollMax = 200 * time.Millisecond
	}
	return b
}

// Restart stops the pipeline and starts a new one under policy, as a new
// process with an edited config would. The API keeps its listener.
func (e *Env) Restart(policy *stet.Policy) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Pipeline.Stop(ctx); err != nil {
		e.t.Fatalf("stop pipeline: %v", err)
	}
	e.start(policy)
}

// Close stops everything.
func (e *Env) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if e.Server != nil {
		e.Server.Close()
	}
	if e.Pipeline != nil {
		_ = e.Pipeline.Stop(ctx)
	}
	e.Fake.Close()
	e.DB.Close()
}

// Report is an intake body.
type Report struct {
	ExternalID string          `json:"external_id,omitempty"`
	Revision   int64           `json:"revision,omitempty"`
	Text       string          `json:"text"`
	Metadata   json.RawMessage `json:"metadata,omitempty"`
}

// Response is an intake answer.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
	api.IntakeResponse
	Problem api.Problem
}

// Deliver posts a signed delivery of body (a Report or raw []byte).
func (e *Env) Deliver(source, webhookID string, body any) Response {
	e.t.Helper()
	raw, ok := body.([]byte)
	if !ok {
		var err error
		raw, err = json.Marshal(body)
		if err != nil {
			e.t.Fatal(err)
		}
	}
	h, err := stetclient.Headers(Secret, webhookID, e.Clock.Now(), raw)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.Post("/v1/sources/"+source+"/reports", h, raw)
}

// Post sends a raw intake request.
func (e *Env) Post(path string, h http.Header, body []byte) Response {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.Server.URL+path, bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
	if resp.StatusCode < 300 {
		_ = json.Unmarshal(b, &r.IntakeResponse)
	} else {
		_ = json.Unmarshal(b, &r.Problem)
	}
	return r
}

// Do sends an API request with a bearer token ("" for none) and decodes a
// JSON answer into out (if non-nil). It returns the status and raw body.
func (e *Env) Do(method, path, token string, in, out any) (int, []byte) {
	e.t.Helper()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			e.t.Fatal(err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, e.Server.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			e.t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
	return resp.StatusCode, b
}

// Count counts rows of a ledger table matching an optional WHERE clause.
func (e *Env) Count(table, where string, args ...any) int {
	e.t.Helper()
	q := "SELECT COUNT(*) FROM " + table
	if where != "" {
		q += " WHERE " + where
	}
	var n int
	if err := e.DB.Writer().QueryRow(q, args...).Scan(&n); err != nil {
		e.t.Fatalf("count %s: %v", table, err)
	}
	return n
}

// JobState reads a job's state from the ledger.
func (e *Env) JobState(jobID string) stet.JobState {
	e.t.Helper()
	var s string
	if err := e.DB.Writer().QueryRow(`SELECT state FROM jobs WHERE public_id = $1`, ledger.StoredID(jobID)).Scan(&s); err != nil {
		e.t.Fatalf("job %s: %v", jobID, err)
	}
	return stet.JobState(s)
}

// WaitJob waits until the job reaches one of states, and fails the test
// after 20 s.
func (e *Env) WaitJob(jobID string, states ...stet.JobState) stet.JobState {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var s stet.JobState
	for time.Now().Before(deadline) {
		s = e.JobState(jobID)
		for _, want := range states {
			if s == want {
				return s
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.t.Fatalf("job %s is %s after 20s, want one of %v\n%s", jobID, s, states, e.tail())
	return s
}

// WaitFor polls cond until it holds, failing the test after 20 s.
func (e *Env) WaitFor(what string, cond func() bool) {
	e.t.Helper()
	e.WaitForWithin(what, 20*time.Second, cond)
}

// WaitForWithin is WaitFor with its own limit, for work that runs as
// several River jobs in turn (a deletion's tasks) on a loaded machine.
func (e *Env) WaitForWithin(what string, limit time.Duration, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.t.Fatalf("timed out waiting for %s\n%s", what, e.tail())
}

func (e *Env) tail() string {
	s := e.Logs.String()
	if len(s) > 4000 {
		s = s[len(s)-4000:]
	}
	return "log tail:\n" + s
}

// Attempts lists a job's attempt statuses and classes, in order, as
// "status" or "status/class".
func (e *Env) Attempts(jobID string) []string {
	e.t.Helper()
	rows, err := e.DB.Writer().Query(`SELECT status, COALESCE(failure_class, '') FROM attempts
		WHERE job_id = (SELECT id FROM jobs WHERE public_id = $1) ORDER BY n`, ledger.StoredID(jobID))
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s, c string
		if err := rows.Scan(&s, &c); err != nil {
			e.t.Fatal(err)
		}
		if c != "" {
			s += "/" + c
		}
		out = append(out, s)
	}
	return out
}

// Record reads the review record of a job via the API.
func (e *Env) Record(jobID string) api.RecordView {
	e.t.Helper()
	var j api.JobView
	if st, b := e.Do(http.MethodGet, "/v1/jobs/"+jobID, OperatorToken, nil, &j); st != http.StatusOK {
		e.t.Fatalf("GET job: %d %s", st, b)
	}
	if j.ReviewRecordID == nil {
		e.t.Fatalf("job %s has no review record", jobID)
	}
	var r api.RecordView
	if st, b := e.Do(http.MethodGet, "/v1/review/"+*j.ReviewRecordID, OperatorToken, nil, &r); st != http.StatusOK {
		e.t.Fatalf("GET record: %d %s", st, b)
	}
	return r
}

// Schema returns the profile's compiled schema.
func (e *Env) Schema() *schema.Schema { return e.profile.Validator }

// MustID returns a fresh webhook-id.
func MustID(prefix string) string { return fmt.Sprintf("msg_%s_%d", prefix, time.Now().UnixNano()) }

// RestartWorkers restarts the pipeline with stage workers under policy.
func (e *Env) RestartWorkers(policy *stet.Policy) {
	e.opts.NoWorkers = false
	e.Restart(policy)
}
