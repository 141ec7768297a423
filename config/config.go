// Package config loads and validates stet's YAML configuration (docs/design.md §8).
//
// Load resolves relative paths against the config file's folder, reads
// secrets only from the environment variables the file names, compiles every
// profile schema, and reports every problem with its key path. It must never
// put a secret's value or document text in an error.
package config

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/schema"
	"go.yaml.in/yaml/v3"
)

// Config is a loaded, validated configuration.
type Config struct {
	// Path is the absolute path of the file this was loaded from.
	Path string `yaml:"-"`

	Database   string      `yaml:"database"`
	Listen     string      `yaml:"listen"`
	BodyLimit  ByteSize    `yaml:"body_limit"` // intake body limit; default 1 MiB
	Tenants    []Tenant    `yaml:"tenants"`
	Sources    []Source    `yaml:"sources"`
	Profiles   []Profile   `yaml:"profiles"`
	Processors []Processor `yaml:"processors"`
	// Transcribers turn audio reports into text (docs/design.md §19): kind
	// pocketsphinx (offline) or openai-transcribe, with a processor's
	// declaration keys.
	Transcribers []Processor `yaml:"transcribers"`
	Policies     []Policy    `yaml:"policies"`
	Workers      Workers     `yaml:"workers"`
	// Admins are cluster-wide admin tokens (docs/design.md §8): they pause and
	// resume every scope and see every tenant's pauses and invariants.
	Admins []Admin `yaml:"admins"`
	// TLS, when set, serves the API over HTTPS with HSTS.
	TLS *TLS `yaml:"tls"`
	// MetricsListen, when set, serves /metrics there instead of on Listen.
	MetricsListen string `yaml:"metrics_listen"`
	Web           Web    `yaml:"web"` // the review UI (docs/design.md §12)
	Alerts        Alerts `yaml:"alerts"`
	// Telemetry, when set, sends OpenTelemetry traces (docs/design.md §8).
	Telemetry Telemetry `yaml:"telemetry"`
	// Encryption, when set, seals text at rest under per-report data keys
	// (docs/design.md §5); nil stores plaintext.
	Encryption *Encryption `yaml:"encryption"`
}

// Admin is one cluster-wide admin token. Value is read from TokenEnv.
type Admin struct {
	Name     string `yaml:"name"`
	TokenEnv string `yaml:"token_env"`
	Value    string `yaml:"-"`
}

// TLS is the API's certificate and key (PEM files, resolved at load).
type TLS struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// IntakeQuota is a tenant's intake quota: deliveries a second, and the
// burst allowed above it.
type IntakeQuota struct {
	RPS   float64 `yaml:"rps"`
	Burst int     `yaml:"burst"`
}

// Alerts are the alert sinks beyond the log and the gauges (docs/design.md §6).
type Alerts struct {
	// Webhook, when its URL is set, receives every alert, signed.
	Webhook Webhook `yaml:"webhook"`
}

// Webhook is a signed outbound webhook target.
type Webhook struct {
	URL       string `yaml:"url"` // https, or http on loopback
	SecretEnv string `yaml:"secret_env"`
	// Secret is the whsec_ secret read from SecretEnv.
	Secret string `yaml:"-"`
}

// Destination is one outbound webhook of a source (docs/design.md §13).
type Destination struct {
	ID        string   `yaml:"id"`
	URL       string   `yaml:"url"` // https, or http on loopback
	SecretEnv string   `yaml:"secret_env"`
	Events    []string `yaml:"events"`  // default [record.committed, record.decided, record.reopened]
	MaxAge    Duration `yaml:"max_age"` // default 24h: then the delivery is failed
	// Secret is the whsec_ secret read from SecretEnv.
	Secret string `yaml:"-"`
}

// Tenant is one tenant and its API tokens.
type Tenant struct {
	ID     string  `yaml:"id"`
	Tokens []Token `yaml:"tokens"`
	// Intake, when set, limits the tenant's deliveries (429 past it).
	Intake *IntakeQuota `yaml:"intake"`
}

// Token is one bearer token. Value is read from TokenEnv at load.
type Token struct {
	Name     string    `yaml:"name"`
	Role     stet.Role `yaml:"role"`
	TokenEnv string    `yaml:"token_env"`
	Value    string    `yaml:"-"`
}

// Source is one webhook source.
type Source struct {
	ID        string            `yaml:"id"`
	Tenant    string            `yaml:"tenant"`
	SecretEnv string            `yaml:"secret_env"`
	Identity  stet.IdentityMode `yaml:"identity"`  // default external_id
	Revisions stet.RevisionMode `yaml:"revisions"` // default explicit
	Profile   string            `yaml:"profile"`
	Policy    string            `yaml:"policy"`
	Mode      stet.DispatchMode `yaml:"mode"` // default sync
	// Media the source delivers: text (the default) and, under a policy
	// that says audio: allow, audio (docs/design.md §19).
	Media []string `yaml:"media"`
	// AudioBodyLimit bounds the body of a source that takes audio;
	// default 25 MiB.
	AudioBodyLimit ByteSize `yaml:"audio_body_limit"`
	// Destinations receive the source's record events (docs/design.md §13).
	Destinations []Destination `yaml:"destinations"`
	// Secrets are the whsec_ secrets read from SecretEnv. The variable may
	// hold several, separated by spaces or commas, for rotation.
	Secrets []string `yaml:"-"`
}

// Profile is one extraction profile.
type Profile struct {
	ID      string `yaml:"id"`
	Version int    `yaml:"version"`
	Schema  string `yaml:"schema"` // path, resolved to absolute at load
	Prompt  string `yaml:"prompt"` // path, resolved to absolute at load
	// Loaded content.
	SchemaJSON json.RawMessage `yaml:"-"`
	PromptText string          `yaml:"-"`
	// Validator is the compiled schema, ready to check outputs.
	Validator *schema.Schema `yaml:"-"`
	// Acceptance is the rule `stet eval` holds a processor to on this
	// profile's labelled data (docs/design.md §14); empty: no rule.
	Acceptance Acceptance `yaml:"acceptance"`
	// Parts split the schema's top-level fields among processors
	// (docs/design.md §16); empty: one request asks for the whole schema.
	Parts []Part `yaml:"parts"`
}

// Part is one part of a profile with parts.
type Part struct {
	ID string `yaml:"id"`
	// Fields are the schema's top-level properties the part extracts, or
	// "*": every property no other part names. Resolved at load into
	// Resolved, in schema order.
	Fields   Fields   `yaml:"fields"`
	Resolved []string `yaml:"-"`
	// Processors extract the part, first the primary; empty: the source's
	// policy's processors. Each must be permitted by the policy of every
	// source using the profile.
	Processors []string `yaml:"processors"`
}

// Fields is a part's list of fields, or "*" for the rest.
type Fields struct {
	List []string
	Rest bool
}

// UnmarshalYAML reads a list of field names or "*".
func (f *Fields) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.Value == "*" {
		*f = Fields{Rest: true}
		return nil
	}
	var list []string
	if n.Kind != yaml.SequenceNode || n.Decode(&list) != nil {
		return &yaml.TypeError{Errors: []string{`must be a list of field names or "*"`}}
	}
	*f = Fields{List: list}
	return nil
}

// Acceptance is a profile's acceptance rule for `stet eval`: a minimum
// exact accuracy per output field and a maximum share of documents whose
// output never passed the schema (repairs included).
type Acceptance struct {
	Fields               map[string]FieldAcceptance `yaml:"fields"`
	MaxSchemaFailureRate *float64                   `yaml:"max_schema_failure_rate"` // nil: no bound
}

// FieldAcceptance is the bound on one output field.
type FieldAcceptance struct {
	MinAccuracy float64 `yaml:"min_accuracy"` // 0..1, required
}

// Price is what a provider charges per million tokens: every attempt's
// cost_usd, the cost metrics, GET /v1/costs, budgets and `stet eval`'s
// cost figures. BatchDiscount is the share off for a provider batch's
// items (0.5: half price).
type Price struct {
	InputPerMTok  float64 `yaml:"input_per_mtok"`
	OutputPerMTok float64 `yaml:"output_per_mtok"`
	BatchDiscount float64 `yaml:"batch_discount"`
}

// Budget caps what a processor may spend (docs/design.md §18): at
// PerDayUSD in a UTC day, dispatch to it pauses until the next day or an
// operator's resume.
type Budget struct {
	PerDayUSD float64 `yaml:"per_day_usd"`
}

// Limits are a processor's provider limits.
type Limits struct {
	RPM         int `yaml:"rpm"`
	TPM         int `yaml:"tpm"`
	Concurrency int `yaml:"concurrency"`
}

// Processor is one configured processor. Kind-specific keys are validated
// by kind; keys a kind does not use are an error.
type Processor struct {
	ID        string `yaml:"id"`
	Kind      string `yaml:"kind"`     // rules | openai | anthropic | gemini | infrai | azure-content-safety
	Rules     string `yaml:"rules"`    // rules: path, resolved to absolute
	BaseURL   string `yaml:"base_url"` // http kinds
	APIKeyEnv string `yaml:"api_key_env"`
	Model     string `yaml:"model"`
	// The boundary declarations: each may be pending (Pending), and a
	// processor with a pending answer is never sent text.
	Region        string   `yaml:"region"`
	Retention     string   `yaml:"retention"` // "none", "0", a duration such as 30d, or pending
	ZeroRetention Answer   `yaml:"zero_data_retention"`
	Subprocessors Names    `yaml:"subprocessors"`
	Deletion      string   `yaml:"deletion"` // api | retention | none | pending; optional
	Timeout       Duration `yaml:"timeout"`  // one call; default 60s
	Limits        Limits   `yaml:"limits"`
	Price         Price    `yaml:"price"`  // zero: free
	Budget        Budget   `yaml:"budget"` // zero: no cap
	// Mapping (azure-content-safety): path of the file that turns category
	// severities into a record of the profile's schema; resolved at load.
	Mapping string `yaml:"mapping"`
	// APIVersion: for azure-content-safety the service's api-version
	// (optional); for openai it selects Azure OpenAI (base_url is the
	// resource endpoint, model the deployment, the key goes in api-key).
	APIVersion string `yaml:"api_version"`
	// ToolUse (anthropic): ask for the output through one forced tool whose
	// input schema is the profile schema, instead of output_config.format.
	ToolUse bool `yaml:"tool_use"`
	// MaxTokens (anthropic): the output budget of one call; optional.
	MaxTokens int `yaml:"max_tokens"`
	// Batch tunes the processor's provider batches (kinds openai,
	// anthropic, gemini, infrai).
	Batch BatchSettings `yaml:"batch"`
	// APIKey is read from APIKeyEnv at load.
	APIKey string `yaml:"-"`
}

// BatchSettings tune a processor's provider batches (docs/design.md §4). Zero
// values take the defaults shown.
type BatchSettings struct {
	MaxItems  int      `yaml:"max_items"`  // a batch is assembled at this many jobs (1000)
	MaxWait   Duration `yaml:"max_wait"`   // or once its oldest job has waited this long (10m)
	PollFirst Duration `yaml:"poll_first"` // the first status poll after submission (30s)
	PollMax   Duration `yaml:"poll_max"`   // the poll backoff cap (10m)
	// OnExpired: where items that ended without an answer (expired,
	// cancelled, a transient error) go: batch (the next batch) or sync.
	OnExpired stet.DispatchMode `yaml:"on_expired"`
}

// Retention is a policy's retention for text and artifacts.
type Retention struct {
	Text      Duration `yaml:"text"`
	Artifacts Duration `yaml:"artifacts"`
	Records   Duration `yaml:"records"` // decided records' classification and note; 0 (default) keeps them
	Audio     Duration `yaml:"audio"`   // audio after its transcript is saved; 0 (default) purges it at once
}

// Policy is one approved data-handling policy.
type Policy struct {
	ID            string                 `yaml:"id"`
	Processors    []string               `yaml:"processors"`
	Minimize      []stet.IdentifierClass `yaml:"minimize"`
	Names         []string               `yaml:"names"`
	Retention     Retention              `yaml:"retention"`
	ReplayHorizon Duration               `yaml:"replay_horizon"`
	Regions       []string               `yaml:"regions"`
	// AllowedSubprocessors, when given, lists who besides a processor's
	// provider may see text under this policy.
	AllowedSubprocessors *[]string `yaml:"allowed_subprocessors"`
	// Transcribers may hear this policy's audio reports, the first
	// primary; Audio must be "allow" for any audio to leave, since audio
	// cannot be minimized.
	Transcribers []string `yaml:"transcribers"`
	Audio        string   `yaml:"audio"` // allow | deny (default)
}

// Workers are stage-worker settings.
type Workers struct {
	Concurrency int      `yaml:"concurrency"`  // default 8
	JobTimeout  Duration `yaml:"job_timeout"`  // default 2m
	RescueAfter Duration `yaml:"rescue_after"` // default 5m
	MaxAttempts int      `yaml:"max_attempts"` // transient attempts before manual; default 5
	// PollInterval is how often an idle worker looks for new extract jobs;
	// default 200ms. The commit, batch and deliver queues are polled five
	// times less often, at most every second (pipeline.SideQueuePoll).
	// (River's SQLite and database/sql drivers poll; they have no
	// notifications.)
	PollInterval Duration `yaml:"poll_interval"`
	// AssembleEvery is how often the batch assembler looks for batch-mode
	// jobs to group; default 5s.
	AssembleEvery Duration `yaml:"assemble_every"`
	// SweepInterval is how often the leader's retention sweeper runs (and
	// looks for deletions whose worker was lost); default 1m.
	SweepInterval Duration `yaml:"sweep_interval"`
	// Heartbeat is how often a worker process writes its heartbeat and
	// looks for dead workers; default 2s. DeadAfter is how old a worker's
	// heartbeat may get before the process is dead and its leases are
	// taken over; default 4 × heartbeat.
	Heartbeat Duration `yaml:"heartbeat"`
	DeadAfter Duration `yaml:"dead_after"`
}

// Duration is a time.Duration that also accepts a day suffix ("30d").
type Duration time.Duration

// ByteSize is a size in bytes that also accepts KiB/MiB suffixes ("1MiB").
type ByteSize int64

// Tenant returns the tenant with the given id, or nil.
func (c *Config) Tenant(id string) *Tenant {
	return find(c.Tenants, id, func(t *Tenant) string { return t.ID })
}

// Source returns the source with the given id, or nil.
func (c *Config) Source(id string) *Source {
	return find(c.Sources, id, func(s *Source) string { return s.ID })
}

// Profile returns the profile with the given id, or nil.
func (c *Config) Profile(id string) *Profile {
	return find(c.Profiles, id, func(p *Profile) string { return p.ID })
}

// Processor returns the processor with the given id, or nil.
func (c *Config) Processor(id string) *Processor {
	return find(c.Processors, id, func(p *Processor) string { return p.ID })
}

// Transcriber returns the transcriber with the given id, or nil.
func (c *Config) Transcriber(id string) *Processor {
	return find(c.Transcribers, id, func(p *Processor) string { return p.ID })
}

// AcceptsAudio reports whether the source takes audio reports.
func (s *Source) AcceptsAudio() bool { return slices.Contains(s.Media, MediaAudio) }

// The media a source may deliver, and a policy's word for letting audio
// leave for its transcribers, or not.
const (
	MediaText  = "text"
	MediaAudio = "audio"
	AudioAllow = "allow"
	AudioDeny  = "deny"
)

// Policy returns the policy with the given id, or nil.
func (c *Config) Policy(id string) *Policy {
	return find(c.Policies, id, func(p *Policy) string { return p.ID })
}

func find[T any](items []T, id string, key func(*T) string) *T {
	for i := range items {
		if key(&items[i]) == id {
			return &items[i]
		}
	}
	return nil
}

// Domain returns the policy as the domain type whose hash is recorded on
// every revision. The slices are copies.
func (p *Policy) Domain() *stet.Policy {
	return &stet.Policy{
		ID:                p.ID,
		Processors:        slices.Clone(p.Processors),
		Minimize:          slices.Clone(p.Minimize),
		Names:             slices.Clone(p.Names),
		TextRetention:     p.Retention.Text.Std(),
		ArtifactRetention: p.Retention.Artifacts.Std(),
		RecordsRetention:  p.Retention.Records.Std(),
		ReplayHorizon:     p.ReplayHorizon.Std(),
		Regions:           slices.Clone(p.Regions),
		Transcribers:      slices.Clone(p.Transcribers),
		AudioAllowed:      p.Audio == AudioAllow,
		AudioRetention:    p.Retention.Audio.Std(),
		AllowedSubprocessors: func() *[]string {
			if p.AllowedSubprocessors == nil {
				return nil
			}
			l := slices.Clone(*p.AllowedSubprocessors)
			if l == nil {
				l = []string{}
			}
			return &l
		}(),
	}
}

// Domain returns the profile as the domain type, with the loaded schema and
// prompt text.
func (p *Profile) Domain() *stet.Profile {
	d := &stet.Profile{
		ID:      p.ID,
		Version: p.Version,
		Schema:  slices.Clone(p.SchemaJSON),
		Prompt:  p.PromptText,
	}
	for _, pt := range p.Parts {
		d.Parts = append(d.Parts, stet.Part{ID: pt.ID, Fields: slices.Clone(pt.Resolved), Processors: slices.Clone(pt.Processors)})
	}
	return d
}
