package main

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/internal/crash"
	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/lab/testdb"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/processor/openai/openaifake"
	"github.com/stetlabs/stet/schema"
)

// schemaFields records the top-level properties of the JSON Schema of
// every request a fake receives.
type schemaFields struct {
	mu   sync.Mutex
	seen [][]string
}

func (s *schemaFields) respond(req openaifake.Request) string {
	props, _ := schema.Properties(req.Schema)
	s.mu.Lock()
	s.seen = append(s.seen, props)
	s.mu.Unlock()
	return openaifake.MinimalInstance(req.Schema)
}

func (s *schemaFields) all() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.seen)
}

// partsConfig rewrites cfg into a two-part moderation profile: part
// triage (category, severity, action) on processor fake-b at fakeB, part
// notes (the rest) on the policy's primary, openai-fake. One worker runs
// one stage at a time, so that a crash after the first part's save finds
// the second not yet called. On PostgreSQL it uses a fresh schema.
func partsConfig(t *testing.T, cfg *e2eConfig, dialect ledger.Dialect, fakeB string) *sql.DB {
	t.Helper()
	return rewriteConfig(t, cfg, dialect, func(y string) string {
		for _, r := range []struct{ old, new string }{
			{"\nprocessors:\n", "\n    parts:\n      - {id: triage, fields: [category, severity, action], processors: [fake-b]}\n" +
				"      - {id: notes, fields: \"*\"}\nprocessors:\n"},
			{"\npolicies:\n", fmt.Sprintf("\n  - id: fake-b\n    kind: openai\n    base_url: %q\n    api_key_env: %s\n    model: gpt-b\n"+
				"    region: us\n    retention: 30d\n    timeout: 30s\npolicies:\n", fakeB, envOpenAIKey)},
			{"    processors: [openai-fake]\n", "    processors: [openai-fake, fake-b]\n"},
			{"  concurrency: 2\n", "  concurrency: 1\n"},
		} {
			if !strings.Contains(y, r.old) {
				t.Fatalf("config lacks %q", r.old)
			}
			y = strings.Replace(y, r.old, r.new, 1)
		}
		return y
	})
}

// A profile with two parts on the real binary, on each dialect: each
// part's request carries only its fields' schema; a SIGKILL right after
// the first part saved leaves the second to the next process, and the
// first is never called again (one call per part); one review record
// merges both, with per-field provenance in GET /v1/review/{id} and each
// part in GET /v1/jobs/{id}. A part refused for good makes the record
// manual, naming the part, with the other part's fields kept.
func TestPartsOnTheRealBinary(t *testing.T) {
	t.Parallel()
	for _, dialect := range testdb.Dialects() {
		t.Run(string(dialect), func(t *testing.T) {
			t.Parallel()
			var seenA, seenB schemaFields
			fakeA := openaifake.New(openaifake.Options{APIKey: testOpenAIKey, Respond: seenA.respond})
			t.Cleanup(fakeA.Close)
			fakeB := openaifake.New(openaifake.Options{APIKey: testOpenAIKey, Respond: seenB.respond})
			t.Cleanup(fakeB.Close)
			cfg := writeConfig(t, t.TempDir(), fakeA.URL())
			db := partsConfig(t, cfg, dialect, fakeB.URL())

			p := startStet(t, cfg, map[string]string{"STET_CRASH_AT": crash.AfterArtifact})
			status, in, err := postReport(p.base, "msg_parts_1", sample(t, "report-001.json"))
			if err != nil || status != http.StatusAccepted {
				t.Fatalf("postReport = %d, %v, want 202", status, err)
			}
			st := p.waitExit(t, 60*time.Second)
			if !killedBySIGKILL(st) {
				t.Fatalf("stet serve exited with %v, want SIGKILL at %s\n%s", st, crash.AfterArtifact, p.tail())
			}
			if db == nil {
				db = openLedgerRO(t, cfg.DBPath)
			}
			if n := count(t, db, `SELECT COUNT(*) FROM jobs WHERE parent_job_id IS NOT NULL AND state = 'committed'`); n != 1 {
				t.Fatalf("parts committed at the crash = %d, want 1", n)
			}
			callsAtCrash := fakeA.Calls() + fakeB.Calls()
			if callsAtCrash != 1 {
				t.Fatalf("provider calls at the crash = %d, want 1 (one worker, the second part not yet called)", callsAtCrash)
			}

			p = startStet(t, cfg, nil)
			waitFor(t, 60*time.Second, "the merged record", p, func() bool {
				return count(t, db, `SELECT COUNT(*) FROM review_records`) == 1
			})
			if a, b := fakeA.Calls(), fakeB.Calls(); a != 1 || b != 1 {
				t.Errorf("provider calls = %d (notes) and %d (triage), want 1 and 1", a, b)
			}
			if got := seenA.all(); len(got) != 1 || !slices.Equal(got[0], []string{"labels", "rationale"}) {
				t.Errorf("notes part's request schemas = %v, want [[labels rationale]]", got)
			}
			if got := seenB.all(); len(got) != 1 || !slices.Equal(got[0], []string{"category", "severity", "action"}) {
				t.Errorf("triage part's request schemas = %v, want [[category severity action]]", got)
			}
			if n := count(t, db, `SELECT COUNT(*) FROM jobs WHERE parent_job_id IS NULL AND state = 'committed'`); n != 1 {
				t.Errorf("committed revision jobs = %d, want 1", n)
			}

			var job api.JobView
			getJSON(t, p.base+"/v1/jobs/"+in.JobID, &job)
			if job.State != "committed" || job.ReviewRecordID == nil || len(job.Parts) != 2 {
				t.Fatalf("job = %s, record %v, %d parts; want committed with a record and 2 parts", job.State, job.ReviewRecordID, len(job.Parts))
			}
			for i, want := range []struct{ id, processor string }{{"triage", "fake-b"}, {"notes", "openai-fake"}} {
				got := job.Parts[i]
				if got.ID != want.id || got.Processor != want.processor || got.State != "committed" || len(got.Attempts) != 1 {
					t.Errorf("part %d = %s on %s, %s, %d attempts; want %s on %s, committed, 1 attempt",
						i, got.ID, got.Processor, got.State, len(got.Attempts), want.id, want.processor)
				}
			}
			var rec api.RecordView
			getJSON(t, p.base+"/v1/review/"+*job.ReviewRecordID, &rec)
			var fields map[string]json.RawMessage
			if rec.Kind != "extracted" || json.Unmarshal(rec.Classification, &fields) != nil || len(fields) != 5 {
				t.Errorf("record = %s %s, want extracted with the 5 fields", rec.Kind, rec.Classification)
			}
			wantProv := map[string][2]string{"category": {"triage", "fake-b"}, "severity": {"triage", "fake-b"},
				"action": {"triage", "fake-b"}, "labels": {"notes", "openai-fake"}, "rationale": {"notes", "openai-fake"}}
			if len(rec.Provenance) != len(wantProv) {
				t.Errorf("provenance = %v, want the 5 fields", rec.Provenance)
			}
			for f, w := range wantProv {
				got := rec.Provenance[f]
				if got.Part != w[0] || got.Processor != w[1] || got.Model == "" {
					t.Errorf("provenance[%s] = %+v, want part %s, processor %s and its model", f, got, w[0], w[1])
				}
			}

			code, out, stderr := runInProcess(t, "inspect", "--config", cfg.Path, in.JobID)
			if code != exitOK || !strings.Contains(out, "  part triage  job "+job.Parts[0].JobID+"  processor fake-b  state committed") ||
				!strings.Contains(out, "  part notes  job "+job.Parts[1].JobID+"  processor openai-fake  state committed") {
				t.Errorf("stet inspect = %d\n%s\n%s\nwant both parts with their processors", code, out, stderr)
			}

			// The triage part refused for good: the record is manual and
			// names it; the notes part's fields are kept for the reviewer.
			fakeB.Enqueue(openaifake.Fault{Kind: openaifake.Refusal})
			status, in2, err := postReport(p.base, "msg_parts_2", sample(t, "report-002.json"))
			if err != nil || status != http.StatusAccepted {
				t.Fatalf("postReport = %d, %v, want 202", status, err)
			}
			waitFor(t, 60*time.Second, "the second record", p, func() bool {
				return count(t, db, `SELECT COUNT(*) FROM review_records`) == 2
			})
			getJSON(t, p.base+"/v1/jobs/"+in2.JobID, &job)
			if job.State != "manual" || job.ReviewRecordID == nil {
				t.Fatalf("refused job = %s, record %v; want manual with a record", job.State, job.ReviewRecordID)
			}
			getJSON(t, p.base+"/v1/review/"+*job.ReviewRecordID, &rec)
			fields = nil
			if rec.Kind != "manual" || rec.FailedPart != "triage" || rec.FailureClass == nil || *rec.FailureClass != "refusal" ||
				json.Unmarshal(rec.Classification, &fields) != nil || len(fields) != 2 || fields["labels"] == nil {
				t.Errorf("refused record = %s, failed part %q, class %v, classification %s; want manual naming triage, refusal, the notes fields",
					rec.Kind, rec.FailedPart, rec.FailureClass, rec.Classification)
			}
			if a, b := fakeA.Calls(), fakeB.Calls(); a != 2 || b != 2 {
				t.Errorf("provider calls after the refusal = %d and %d, want 2 and 2 (a refusal is not retried)", a, b)
			}
			if code, out, stderr := runInProcess(t, "check", "--config", cfg.Path); code != exitOK {
				t.Errorf("stet check = %d\n%s\n%s", code, out, stderr)
			}
		})
	}
}

// getJSON GETs url with the operator's token and decodes a 200 answer.
func getJSON(t *testing.T, url string, out any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d", url, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// A profile with parts in batch mode: each part goes into its own
// processor's provider batch (no synchronous call), each batch line asks
// for its part's fields only, and every report gets one merged record
// with provenance.
func TestPartsInBatchMode(t *testing.T) {
	t.Parallel()
	var seenA, seenB schemaFields
	fakeA := openaifake.New(openaifake.Options{APIKey: testOpenAIKey, Respond: seenA.respond})
	t.Cleanup(fakeA.Close)
	fakeB := openaifake.New(openaifake.Options{APIKey: testOpenAIKey, Respond: seenB.respond})
	t.Cleanup(fakeB.Close)
	cfg := writeConfig(t, t.TempDir(), fakeA.URL())
	partsConfig(t, cfg, ledger.SQLite, fakeB.URL())
	b, err := os.ReadFile(cfg.Path)
	if err != nil {
		t.Fatal(err)
	}
	y := strings.Replace(string(b), "    mode: sync", "    mode: batch", 1)
	y = strings.ReplaceAll(y, "    timeout: 30s\n", "    timeout: 30s\n    batch: {max_items: 10, max_wait: 200ms, poll_first: 100ms, poll_max: 300ms}\n")
	y = strings.Replace(y, "  rescue_after: 3s", "  rescue_after: 3s\n  assemble_every: 100ms", 1)
	if err := os.WriteFile(cfg.Path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startStet(t, cfg, nil)
	for i := 1; i <= 3; i++ {
		status, _, err := postReport(p.base, fmt.Sprintf("msg_batch_parts_%d", i), sample(t, fmt.Sprintf("report-00%d.json", i)))
		if err != nil || status != http.StatusAccepted {
			t.Fatalf("postReport %d = %d, %v, want 202", i, status, err)
		}
	}
	db := openLedgerRO(t, cfg.DBPath)
	waitFor(t, 60*time.Second, "three merged records", p, func() bool {
		return count(t, db, `SELECT COUNT(*) FROM review_records WHERE kind = 'extracted'`) == 3
	})
	if a, b := fakeA.Calls(), fakeB.Calls(); a != 0 || b != 0 {
		t.Errorf("synchronous calls = %d and %d, want 0 and 0", a, b)
	}
	if a, b := fakeA.BatchStats().Created, fakeB.BatchStats().Created; a < 1 || b < 1 {
		t.Errorf("batches created = %d and %d, want at least one each", a, b)
	}
	if n := count(t, db, `SELECT COUNT(*) FROM batch_items`); n != 6 {
		t.Errorf("batch items = %d, want 6 (3 reports × 2 parts)", n)
	}
	for name, s := range map[string]*schemaFields{"notes": &seenA, "triage": &seenB} {
		want := map[string][]string{"notes": {"labels", "rationale"}, "triage": {"category", "severity", "action"}}[name]
		got := s.all()
		if len(got) != 3 {
			t.Errorf("%s part's batch lines = %d, want 3", name, len(got))
		}
		for _, g := range got {
			if !slices.Equal(g, want) {
				t.Errorf("%s part's batch line asked for %v, want %v", name, g, want)
			}
		}
	}
	if n := count(t, db, `SELECT COUNT(*) FROM review_records WHERE provenance IS NOT NULL`); n != 3 {
		t.Errorf("records with provenance = %d, want 3", n)
	}
	if n := count(t, db, `SELECT COUNT(*) FROM jobs WHERE parent_job_id IS NOT NULL AND mode = 'batch' AND state = 'committed'`); n != 6 {
		t.Errorf("committed batch-mode part jobs = %d, want 6", n)
	}
}

// The parts example runs offline as the quickstart does: every sample gets
// one record merged from two parts' jobs, with provenance naming each
// field's rules processor, and stet check is clean.
func TestPartsExample(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	examples := filepath.Join(stettest.RepoRoot(), "examples")
	copyTree(t, filepath.Join(examples, "quickstart"), filepath.Join(root, "quickstart"), "stet-data")
	copyTree(t, filepath.Join(examples, "parts"), filepath.Join(root, "parts"), "stet-data", "samples")
	if err := os.Symlink("../quickstart/samples", filepath.Join(root, "parts", "samples")); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "parts")
	code, out, stderr := runInProcess(t, "quickstart", "--once", "--dir", dir, "--listen", "127.0.0.1:0")
	if code != exitOK || !strings.Contains(out, "review queue (10 records)") {
		t.Fatalf("quickstart --dir examples/parts = %d\n%s\n%s", code, out, stderr)
	}
	db := openLedgerRO(t, filepath.Join(dir, "stet-data", "stet.db"))
	if n := count(t, db, `SELECT COUNT(*) FROM review_records WHERE kind = 'extracted'
		AND provenance LIKE '%"category":{"part":"triage","processor":"local-rules-triage"%'
		AND provenance LIKE '%"labels":{"part":"notes","processor":"local-rules-notes"%'`); n != 10 {
		t.Errorf("extracted records with both parts' provenance = %d, want 10", n)
	}
	if n := count(t, db, `SELECT COUNT(*) FROM jobs WHERE parent_job_id IS NOT NULL AND state = 'committed'`); n != 20 {
		t.Errorf("committed part jobs = %d, want 20", n)
	}
	if code, out, stderr := runInProcess(t, "check", "--config", filepath.Join(dir, "stet.yaml")); code != exitOK {
		t.Errorf("stet check = %d\n%s\n%s", code, out, stderr)
	}
}
