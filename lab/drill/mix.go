package drill

// The drill's mix beyond its main sync source (docs/drills.md): a share of
// the reports go to a source whose profile has two parts, and a share to a
// source whose policy's primary processor has a pending declaration, so
// that every job there is blocked until the drill's operator moves it with
// `stet reroute` — while workers die and the database restarts like
// everywhere else.

import (
	"context"
	"database/sql"
	"encoding/json"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/stetlabs/stet/ledger"
)

const (
	partsSource   = "drill-parts"   // profile split: two parts
	rerouteSource = "drill-reroute" // policy drill-moving: primary pending
	// partsEvery and rerouteEvery: report n goes to the parts source when
	// n%partsEvery == 1 and to the reroute source when n%rerouteEvery == 3
	// (batch-mode reports stay batch-mode).
	partsEvery   = 4
	rerouteEvery = 8
	// partsSchemaPrefix starts the schema name of a part's request
	// (SchemaName: "split_v1_" and the part's ID).
	partsSchemaPrefix = "split_v1_"
	// pendingModel is the model of the processor whose retention answer is
	// pending: a call with it is a call the gate must never make.
	pendingModel = "gpt-drill-pending"
	// rerouteEvery is how often the operator reroutes during the load.
	rerouteInterval = 1500 * time.Millisecond
)

// useMixSources sends the parts and reroute shares of the reports (not
// already batch-mode) to their sources.
func useMixSources(revs []*docRevision) {
	for _, r := range revs {
		if r.Source != source {
			continue
		}
		switch {
		case r.Doc%partsEvery == 1:
			r.Source = partsSource
		case r.Doc%rerouteEvery == 3:
			r.Source = rerouteSource
		}
	}
}

// mixYAML are the config's lines for the mix: its sources, its profile,
// its processors (the same fake under other IDs and models) and policies.
func mixYAML(fakeURL string) (sources, profiles, processors, policies string) {
	sources = "\n  - {id: " + partsSource + ", tenant: drill, secret_env: " + envSecret +
		", identity: external_id, revisions: explicit, profile: split, policy: drill-parts, mode: sync}" +
		"\n  - {id: " + rerouteSource + ", tenant: drill, secret_env: " + envSecret +
		", identity: external_id, revisions: explicit, profile: moderation, policy: drill-moving, mode: sync}"
	profiles = "\n  - id: split\n    version: 1\n    schema: profiles/moderation.schema.json\n    prompt: profiles/moderation.prompt.tmpl" +
		"\n    parts:\n      - {id: triage, fields: [category, severity], processors: [openai-fake-b]}\n      - {id: notes, fields: \"*\"}"
	processors = "\n  - {id: openai-fake-b, kind: openai, base_url: \"" + fakeURL + "\", api_key_env: " + envKey +
		", model: gpt-drill-b, region: us, retention: 30d, timeout: 10s}" +
		"\n  - {id: openai-fake-pending, kind: openai, base_url: \"" + fakeURL + "\", api_key_env: " + envKey +
		", model: " + pendingModel + ", region: us, retention: pending, timeout: 10s}"
	policies = `
  - id: drill-parts
    processors: [openai-fake, openai-fake-b]
    minimize: [email, phone, ssn, mrn, url, ip, date]
    retention: {text: 30d, artifacts: 365d}
  - id: drill-moving
    processors: [openai-fake-pending, openai-fake]
    minimize: [email, phone, ssn, mrn, url, ip, date]
    retention: {text: 30d, artifacts: 365d}`
	return sources, profiles, processors, policies
}

// MixResult is the outcome of the drill's parts and reroute sources.
type MixResult struct {
	// PartsRevisions are the acknowledged revisions of the parts source;
	// PartsRecords the review records of its revision jobs, of which
	// WithProvenance carry provenance for every field; PartJobs the part
	// jobs under them (two per revision job: more is duplicated work).
	PartsRevisions int `json:"parts_revisions"`
	PartsRecords   int `json:"parts_records"`
	WithProvenance int `json:"parts_records_with_provenance"`
	PartJobs       int `json:"part_jobs"`
	// PartJobsWrong counts revision jobs of the parts profile without
	// exactly two part jobs: must be 0.
	PartJobsWrong int `json:"revision_jobs_without_two_parts"`
	// RerouteRevisions are the acknowledged revisions of the reroute
	// source; Rerouted the jobs the operator's `stet reroute` runs moved
	// (RerouteRuns, of which RerouteFailed failed, e.g. during the
	// database restart); Decisions the boundary decisions the ledger
	// holds; PendingCalls the provider calls made with the pending
	// processor's model (must be 0).
	RerouteRevisions int `json:"reroute_revisions"`
	Rerouted         int `json:"rerouted_jobs"`
	RerouteRuns      int `json:"reroute_runs"`
	RerouteFailed    int `json:"reroute_runs_failed"`
	Decisions        int `json:"boundary_decisions"`
	PendingCalls     int `json:"pending_processor_calls"`
	// UndecidedReroutes counts committed or manual jobs of the reroute
	// source without a boundary decision: the gate let text through
	// without an operator. Must be 0.
	UndecidedReroutes int `json:"reroute_jobs_without_decision"`
}

// rerouter is the drill's operator for blocked jobs: it runs `stet reroute`
// for the reroute source's policy, during the load and the drain.
type rerouter struct {
	binary, config string
	env            []string
	say            func(string, ...any)

	mu   sync.Mutex
	last time.Time
	res  *MixResult
}

// tend reroutes once if the last run was long enough ago.
func (r *rerouter) tend(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.last) < rerouteInterval {
		return
	}
	r.last = time.Now()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, r.binary, "reroute", "--config", r.config, "--scope", "policy:drill-moving",
		"--to", "openai-fake", "--reason", "chaos drill operator", "--json")
	cmd.Env = r.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.Output()
	r.res.RerouteRuns++
	var rr ledger.Rerouted
	if err != nil || json.Unmarshal(out, &rr) != nil {
		r.res.RerouteFailed++
		return
	}
	if len(rr.Jobs) > 0 {
		r.res.Rerouted += len(rr.Jobs)
		r.say("operator rerouted %d blocked jobs to openai-fake", len(rr.Jobs))
	}
}

// run tends until ctx ends.
func (r *rerouter) run(ctx context.Context) {
	for sleep(ctx, rerouteInterval) {
		r.tend(ctx)
	}
}

// evaluateMix fills m from the ledger and the provider's call log.
func evaluateMix(ctx context.Context, m *MixResult, db *sql.DB, plan []*delivery, calls []fakeCall) error {
	parts, reroute := map[revKey]bool{}, map[revKey]bool{}
	for _, d := range plan {
		if !d.acked || d.givenUp {
			continue
		}
		k := revKey{d.Rev.ExternalID, int64(d.Rev.Rev)}
		switch d.Rev.Source {
		case partsSource:
			parts[k] = true
		case rerouteSource:
			reroute[k] = true
		}
	}
	m.PartsRevisions, m.RerouteRevisions = len(parts), len(reroute)
	err := db.QueryRowContext(ctx, `SELECT
			(SELECT COUNT(*) FROM review_records r JOIN jobs j ON j.id = r.job_id WHERE j.source_id = $1),
			(SELECT COUNT(*) FROM review_records r JOIN jobs j ON j.id = r.job_id WHERE j.source_id = $1
				AND r.provenance IS NOT NULL AND r.provenance LIKE '%"category"%' AND r.provenance LIKE '%"severity"%' AND r.provenance LIKE '%"rationale"%'),
			(SELECT COUNT(*) FROM jobs WHERE source_id = $1 AND parent_job_id IS NOT NULL),
			(SELECT COUNT(*) FROM jobs p WHERE p.source_id = $1 AND p.parent_job_id IS NULL
				AND (SELECT COUNT(*) FROM jobs c WHERE c.parent_job_id = p.id) <> 2),
			(SELECT COUNT(*) FROM boundary_decisions d JOIN jobs j ON j.id = d.job_id WHERE j.source_id = $2),
			(SELECT COUNT(*) FROM jobs j WHERE j.source_id = $2 AND j.state IN ('committed', 'manual')
				AND NOT EXISTS (SELECT 1 FROM boundary_decisions d WHERE d.job_id = j.id))`, partsSource, rerouteSource).
		Scan(&m.PartsRecords, &m.WithProvenance, &m.PartJobs, &m.PartJobsWrong, &m.Decisions, &m.UndecidedReroutes)
	if err != nil {
		return err
	}
	for _, c := range calls {
		if c.Model == pendingModel {
			m.PendingCalls++
		}
	}
	return nil
}

// callPart is the part a provider request asked for ("" for a whole
// profile), from its schema's name.
func callPart(schemaName string) string {
	if rest, ok := strings.CutPrefix(schemaName, partsSchemaPrefix); ok {
		return rest
	}
	return ""
}
