package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/internal/crash"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/anthropic/anthropicfake"
	"github.com/stetlabs/stet/processor/gemini/geminifake"
	"github.com/stetlabs/stet/processor/infrai/infraifake"
	"github.com/stetlabs/stet/processor/openai"
	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// writeBatchConfig writes a config like writeConfig's whose source is in
// batch mode and whose processor is kind at baseURL, with fast batch
// settings.
func writeBatchConfig(t testing.TB, dir, kind, baseURL, model string, maxItems int) *e2eConfig {
	t.Helper()
	c := writeConfig(t, dir, baseURL)
	b, err := os.ReadFile(c.Path)
	if err != nil {
		t.Fatal(err)
	}
	y := string(b)
	y = strings.Replace(y, "    mode: sync", "    mode: batch", 1)
	y = strings.Replace(y, "    kind: openai", "    kind: "+kind, 1)
	y = strings.Replace(y, "    model: gpt-test", "    model: "+model, 1)
	y = strings.Replace(y, "    timeout: 30s", fmt.Sprintf("    timeout: 30s\n    batch: {max_items: %d, max_wait: 200ms, poll_first: 100ms, poll_max: 300ms}", maxItems), 1)
	if kind == "infrai" {
		// Infrai names the upstream vendor of each answer (the fake's is
		// openai): an undeclared one discards the output.
		y = strings.Replace(y, "    timeout: 30s", "    subprocessors: [openai]\n    timeout: 30s", 1)
	}
	y = strings.Replace(y, "  rescue_after: 3s", "  rescue_after: 3s\n  assemble_every: 100ms", 1)
	if err := os.WriteFile(c.Path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	return c
}

// writeNDJSON writes n reports, one per line.
func writeNDJSON(t testing.TB, dir string, n int) string {
	t.Helper()
	var sb strings.Builder
	for i := range n {
		b, _ := json.Marshal(map[string]any{"external_id": fmt.Sprintf("r-%05d", i), "revision": 1,
			"text": fmt.Sprintf("Report %d. Contact jane%d@example.com. You are all idiots.", i, i)})
		sb.Write(b)
		sb.WriteByte('\n')
	}
	path := filepath.Join(dir, "reports.ndjson")
	if err := os.WriteFile(path, []byte(sb.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// batchProvider is one provider's fake as the batch drills see it.
type batchProvider struct {
	kind, model string
	start       func(t *testing.T) (url string, created, createCalls func() int)
}

var batchProviders = []batchProvider{
	{kind: "openai", model: "gpt-test", start: func(t *testing.T) (string, func() int, func() int) {
		f := openaifake.New(openaifake.Options{APIKey: testOpenAIKey})
		t.Cleanup(f.Close)
		return f.URL(), func() int { return f.BatchStats().Created }, func() int { return f.BatchStats().CreateCalls }
	}},
	{kind: "anthropic", model: "claude-test", start: func(t *testing.T) (string, func() int, func() int) {
		f := anthropicfake.New(anthropicfake.Options{APIKey: testOpenAIKey})
		t.Cleanup(f.Close)
		return f.URL(), func() int { return f.BatchCounts().Created }, func() int { return f.BatchCounts().CreateCalls }
	}},
	{kind: "gemini", model: "gemini-2.5-flash", start: func(t *testing.T) (string, func() int, func() int) {
		f := geminifake.New(geminifake.Options{APIKey: testOpenAIKey})
		t.Cleanup(f.Close)
		return f.URL(), func() int { return f.BatchCounts().Created }, func() int { return f.BatchCounts().CreateCalls }
	}},
	{kind: "infrai", model: "gpt-4.1-mini", start: func(t *testing.T) (string, func() int, func() int) {
		f := infraifake.New(infraifake.Options{APIKey: testOpenAIKey})
		t.Cleanup(f.Close)
		return f.URL(), func() int { return f.BatchCounts().Created }, func() int { return f.BatchCounts().CreateCalls }
	}},
}

// Drill 7, for each provider: the real binary is SIGKILLed between the
// provider's creating call and persisting the batch ID. After a restart
// exactly one batch exists at the provider and every report has its record.
func TestBatchCrashBetweenSubmitAndPersist(t *testing.T) {
	t.Parallel()
	for _, bp := range batchProviders {
		t.Run(bp.kind, func(t *testing.T) {
			t.Parallel()
			url, created, createCalls := bp.start(t)
			cfg := writeBatchConfig(t, t.TempDir(), bp.kind, url, bp.model, 3)
			file := writeNDJSON(t, cfg.Dir, 3)
			if code, out, errOut := runBinary(t, cfg.Dir, "import", "--config", cfg.Path, "--source", testSource, file); code != 0 {
				t.Fatalf("stet import = %d\n%s\n%s", code, out, errOut)
			}
			p := startStet(t, cfg, map[string]string{"STET_CRASH_AT": crash.AfterBatchSubmit})
			if st := p.waitExit(t, 60*time.Second); !killedBySIGKILL(st) {
				t.Fatalf("serve ended with %v, want SIGKILL at %s", st, crash.AfterBatchSubmit)
			}
			if n := created(); n != 1 {
				t.Fatalf("batches at the provider after the crash = %d, want 1", n)
			}
			db := openLedgerRO(t, cfg.DBPath)
			if n := count(t, db, `SELECT COUNT(*) FROM batches WHERE provider_batch_id IS NULL AND submit_started_at IS NOT NULL`); n != 1 {
				t.Fatalf("batches in flight without a provider ID = %d, want 1", n)
			}
			p2 := startStet(t, cfg, nil)
			waitFor(t, 60*time.Second, "3 records", p2, func() bool {
				return count(t, db, `SELECT COUNT(*) FROM review_records`) == 3
			})
			if n := created(); n != 1 {
				t.Errorf("batches at the provider = %d, want 1", n)
			}
			wantCalls := 1
			if bp.kind == "infrai" {
				wantCalls = 2 // resent with the same Idempotency-Key; the provider returns the same batch
			}
			if n := createCalls(); n != wantCalls {
				t.Errorf("creating calls = %d, want %d", n, wantCalls)
			}
			for table, want := range map[string]int{"batches": 1, "artifacts": 3, "batch_items": 3} {
				if n := count(t, db, `SELECT COUNT(*) FROM `+table); n != want {
					t.Errorf("%s = %d, want %d", table, n, want)
				}
			}
		})
	}
}

// Crash during apply: the binary dies after the first chunk of items is
// applied; after a restart only the rest are applied, and the records equal
// the items.
func TestBatchCrashMidApply(t *testing.T) {
	t.Parallel()
	f := openaifake.New(openaifake.Options{APIKey: testOpenAIKey})
	t.Cleanup(f.Close)
	const n = 250 // more than one apply chunk (200)
	cfg := writeBatchConfig(t, t.TempDir(), "openai", f.URL(), "gpt-test", n)
	file := writeNDJSON(t, cfg.Dir, n)
	if code, out, errOut := runBinary(t, cfg.Dir, "import", "--config", cfg.Path, "--source", testSource, file); code != 0 {
		t.Fatalf("stet import = %d\n%s\n%s", code, out, errOut)
	}
	p := startStet(t, cfg, map[string]string{"STET_CRASH_AT": crash.MidApply})
	if st := p.waitExit(t, 60*time.Second); !killedBySIGKILL(st) {
		t.Fatalf("serve ended with %v, want SIGKILL at %s", st, crash.MidApply)
	}
	db := openLedgerRO(t, cfg.DBPath)
	applied := count(t, db, `SELECT COUNT(*) FROM batch_items WHERE applied_at IS NOT NULL`)
	if applied == 0 || applied >= n {
		t.Fatalf("items applied at the crash = %d, want some but not all of %d", applied, n)
	}
	p2 := startStet(t, cfg, nil)
	// The records commit before the batch is marked applied (a separate,
	// later transaction), so wait for both.
	waitFor(t, 60*time.Second, "all records and the batch applied", p2, func() bool {
		return count(t, db, `SELECT COUNT(*) FROM review_records`) == n &&
			count(t, db, `SELECT COUNT(*) FROM batches WHERE applied_at IS NOT NULL`) == 1
	})
	for q, want := range map[string]int{
		`SELECT COUNT(*) FROM artifacts`:                                                            n,
		`SELECT COUNT(*) FROM batch_items WHERE applied_at IS NOT NULL`:                             n,
		`SELECT COUNT(*) FROM batch_items WHERE outcome = 'succeeded'`:                              n,
		`SELECT COUNT(*) FROM attempts WHERE batch_id IS NOT NULL`:                                  n,
		`SELECT COUNT(*) FROM batches WHERE applied_at IS NOT NULL`:                                 1,
		`SELECT COUNT(*) FROM jobs WHERE state = 'committed'`:                                       n,
		`SELECT COUNT(*) FROM review_records WHERE authoritative`:                                   n,
		`SELECT COUNT(*) FROM (SELECT job_id FROM artifacts GROUP BY job_id HAVING COUNT(*) > 1) d`: 0,
	} {
		if got := count(t, db, q); got != want {
			t.Errorf("%s = %d, want %d", q, got, want)
		}
	}
	if st := f.BatchStats(); st.Created != 1 || st.ResultFetches < 2 {
		t.Errorf("fake stats = %+v, want 1 batch, results fetched again after the crash", st)
	}
}

// Crash before the create: the binary dies with the submission recorded in
// flight and nothing sent. The next run's lookup finds no batch, and a
// lookup that finds none is not proof (a create still in flight, a listing
// that lags), so the batch goes to unknown and nothing is sent. An
// operator who finds nothing at the provider resubmits with stet batch
// reconcile: one batch is created and every report gets its record. The
// chaos drill's batch variant plays this operator (lab/drill,
// batchOperator).
func TestBatchCrashBeforeCreate(t *testing.T) {
	t.Parallel()
	f := openaifake.New(openaifake.Options{APIKey: testOpenAIKey})
	t.Cleanup(f.Close)
	cfg := writeBatchConfig(t, t.TempDir(), "openai", f.URL(), "gpt-test", 3)
	file := writeNDJSON(t, cfg.Dir, 3)
	if code, out, errOut := runBinary(t, cfg.Dir, "import", "--config", cfg.Path, "--source", testSource, file); code != 0 {
		t.Fatalf("stet import = %d\n%s\n%s", code, out, errOut)
	}
	p := startStet(t, cfg, map[string]string{"STET_CRASH_AT": crash.BeforeBatchCreate})
	if st := p.waitExit(t, 60*time.Second); !killedBySIGKILL(st) {
		t.Fatalf("serve ended with %v, want SIGKILL at %s", st, crash.BeforeBatchCreate)
	}
	db := openLedgerRO(t, cfg.DBPath)
	if st := f.BatchStats(); st.CreateCalls != 0 {
		t.Fatalf("creating calls before the crash = %d, want 0", st.CreateCalls)
	}
	if n := count(t, db, `SELECT COUNT(*) FROM batches WHERE provider_batch_id IS NULL AND submit_started_at IS NOT NULL`); n != 1 {
		t.Fatalf("batches in flight without a provider ID = %d, want 1", n)
	}
	p2 := startStet(t, cfg, nil)
	waitFor(t, 60*time.Second, "the batch in unknown", p2, func() bool {
		return count(t, db, `SELECT COUNT(*) FROM batches WHERE state = 'unknown'`) == 1
	})
	var id string
	if err := db.QueryRow(`SELECT id FROM batches`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if st := f.BatchStats(); st.CreateCalls != 0 || st.ListCalls == 0 {
		t.Fatalf("fake stats after the lookup = %+v, want no creating call and a listing", st)
	}
	if code, out, errOut := runBinary(t, cfg.Dir, "batch", "reconcile", "--config", cfg.Path, "--actor", "test-operator", "--resubmit", id); code != 0 {
		t.Fatalf("stet batch reconcile --resubmit = %d\n%s\n%s", code, out, errOut)
	}
	waitFor(t, 60*time.Second, "3 records", p2, func() bool {
		return count(t, db, `SELECT COUNT(*) FROM review_records`) == 3
	})
	if st := f.BatchStats(); st.Created != 1 || st.CreateCalls != 1 {
		t.Errorf("fake stats = %+v, want 1 batch from 1 creating call", st)
	}
	for q, want := range map[string]int{
		`SELECT COUNT(*) FROM batches`:                                             1,
		`SELECT COUNT(*) FROM artifacts`:                                           3,
		`SELECT COUNT(*) FROM audit_log WHERE action = 'batch.reconcile.resubmit'`: 1,
	} {
		if got := count(t, db, q); got != want {
			t.Errorf("%s = %d, want %d", q, got, want)
		}
	}
}

// stet batch status: one lookup with bounded retries, its exit codes, and
// what it refuses.
func TestBatchStatusCommand(t *testing.T) {
	t.Parallel()
	f := openaifake.New(openaifake.Options{APIKey: testOpenAIKey, Batch: openaifake.BatchOptions{PollsToEnd: -1}})
	t.Cleanup(f.Close)
	cfg := writeBatchConfig(t, t.TempDir(), "openai", f.URL(), "gpt-test", 10)
	c, err := openai.New(openai.Config{Common: processor.Common{ID: "openai-fake", BaseURL: f.URL(), APIKey: testOpenAIKey, Model: "gpt-test", Region: "us", Retention: "30d"}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.SubmitBatch(t.Context(), stet.BatchSubmit{BatchID: "bat_status_test", Items: []stet.BatchItem{{JobID: "job_1",
		Params: stet.ExtractParams{JobID: "job_1", Prompt: stet.NewText("Classify: hello"), SchemaName: "moderation_v1",
			Schema: json.RawMessage(`{"type":"object","properties":{"category":{"type":"string"}},"required":["category"],"additionalProperties":false}`)}}},
		BeforeCreate: func(context.Context, string) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	status := func(args ...string) (int, string, string) {
		return runInProcess(t, append([]string{"batch", "status", "--config", cfg.Path, "--processor", "openai-fake"}, args...)...)
	}
	calls := func() int { return f.BatchStats().StatusCalls }
	creates := f.BatchStats().CreateCalls

	code, out, errOut := status(h.ProviderID)
	if code != exitOK || !strings.Contains(out, "in_progress") {
		t.Errorf("status = %d %q %q, want 0 and the state", code, out, errOut)
	}
	code, out, _ = status("--json", h.ProviderID)
	var raw map[string]any
	if code != exitOK || json.Unmarshal([]byte(out), &raw) != nil || raw["id"] != h.ProviderID {
		t.Errorf("status --json = %d %q, want the provider's raw batch object", code, out)
	}

	// Three 429s: three attempts, then exit 1.
	before := calls()
	for range 3 {
		f.EnqueueBatch(openaifake.BatchRouteStatus, openaifake.Fault{Kind: openaifake.RateLimit, RetryAfter: "1"})
	}
	code, _, errOut = status(h.ProviderID)
	if code != exitFailure || calls()-before != 3 {
		t.Errorf("status after three 429s = %d (%d calls) %q, want 1 after 3 calls", code, calls()-before, errOut)
	}
	// A 429 with an HTTP-date, then an answer.
	before = calls()
	f.EnqueueBatch(openaifake.BatchRouteStatus, openaifake.Fault{Kind: openaifake.RateLimit, RetryAfter: time.Now().Add(time.Second).UTC().Format(http.TimeFormat)})
	code, _, errOut = status(h.ProviderID)
	if code != exitOK || calls()-before != 2 {
		t.Errorf("status after one 429 = %d (%d calls) %q, want 0 after 2 calls", code, calls()-before, errOut)
	}
	// A redirect is refused: one call, exit 1.
	before = calls()
	f.EnqueueBatch(openaifake.BatchRouteStatus, openaifake.Fault{Kind: openaifake.Redirect})
	if code, _, errOut = status(h.ProviderID); code != exitFailure || calls()-before != 1 {
		t.Errorf("status on a redirect = %d (%d calls) %q, want 1 after 1 call", code, calls()-before, errOut)
	}
	// A body over 1 MiB is refused.
	f.EnqueueBatch(openaifake.BatchRouteStatus, openaifake.Fault{Kind: openaifake.HugeBody})
	if code, out, errOut = status(h.ProviderID); code != exitFailure || out != "" {
		t.Errorf("status on a 2 MiB body = %d %q %q, want 1 and nothing printed", code, out, errOut)
	}
	// An unknown provider batch: exit 1; an unknown stet batch ID: exit 2.
	if code, _, _ = status("batch_does_not_exist"); code != exitFailure {
		t.Errorf("status of an unknown provider batch = %d, want 1", code)
	}
	if code, _, errOut = runInProcess(t, "migrate", "--config", cfg.Path); code != exitOK {
		t.Fatalf("migrate = %d %s", code, errOut)
	}
	if code, _, _ = runInProcess(t, "batch", "status", "--config", cfg.Path, "bat_nope"); code != exitUsage {
		t.Errorf("status of an unknown stet batch = %d, want 2", code)
	}
	if f.BatchStats().CreateCalls != creates {
		t.Errorf("create calls = %d, want %d: status never submits", f.BatchStats().CreateCalls, creates)
	}
	code, _, errOut = runInProcess(t, "batch", "status", "-h")
	if code != exitOK || !strings.Contains(errOut, "never submits") || !strings.Contains(errOut, "never sends document") {
		t.Errorf("batch status -h = %d %q, want the promise that it never submits nor sends text", code, errOut)
	}
}

// stet import: accepts every line through the source's rules, reports bad
// lines by number without their text, and running the same file again
// skips what was accepted. stet batch list shows the batches.
func TestImportResumableAndBatchList(t *testing.T) {
	t.Parallel()
	f := openaifake.New(openaifake.Options{APIKey: testOpenAIKey})
	t.Cleanup(f.Close)
	cfg := writeBatchConfig(t, t.TempDir(), "openai", f.URL(), "gpt-test", 100)
	file := writeNDJSON(t, cfg.Dir, 20)
	// Two bad lines: no revision, and text that is not a string.
	b, _ := os.ReadFile(file)
	b = append(b, []byte("{\"external_id\":\"bad-1\",\"text\":\"SECRET-LINE-TEXT\"}\n\n{\"external_id\":\"bad-2\",\"revision\":1,\"text\":5}\n")...)
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runInProcess(t, "import", "--config", cfg.Path, "--source", testSource, "--json", file)
	var sum map[string]any
	if code != exitFailure || json.Unmarshal([]byte(out), &sum) != nil || sum["accepted"] != 20.0 || sum["rejected"] != 2.0 || sum["mode"] != "batch" {
		t.Fatalf("import = %d %q %q, want 1 with 20 accepted and 2 rejected", code, out, errOut)
	}
	if !strings.Contains(errOut, "line 21: revision is required") || !strings.Contains(errOut, "line 23:") || strings.Contains(errOut, "SECRET-LINE-TEXT") {
		t.Errorf("import stderr = %q, want the bad lines named by number, without their text", errOut)
	}
	db := openLedgerRO(t, cfg.DBPath)
	if n := count(t, db, `SELECT COUNT(*) FROM jobs WHERE mode = 'batch' AND state = 'accepted'`); n != 20 {
		t.Errorf("batch-mode jobs waiting = %d, want 20", n)
	}
	// Again, in sync mode: nothing new (the mode applies to new jobs only).
	code, out, _ = runInProcess(t, "import", "--config", cfg.Path, "--source", testSource, "--mode", "sync", "--json", file)
	sum = nil
	if code != exitFailure || json.Unmarshal([]byte(out), &sum) != nil || sum["accepted"] != 0.0 || sum["duplicate"] != 20.0 {
		t.Errorf("import again = %d %q, want 0 accepted, 20 already there", code, out)
	}
	if n := count(t, db, `SELECT COUNT(*) FROM jobs`); n != 20 {
		t.Errorf("jobs = %d, want 20", n)
	}
	if n := count(t, db, `SELECT COUNT(*) FROM river_job`); n != 0 {
		t.Errorf("river jobs = %d, want 0: batch-mode jobs wait for the assembler", n)
	}

	p := startStet(t, cfg, nil)
	waitFor(t, 60*time.Second, "20 records", p, func() bool { return count(t, db, `SELECT COUNT(*) FROM review_records`) == 20 })
	code, out, errOut = runInProcess(t, "batch", "list", "--config", cfg.Path, "--json")
	var list struct {
		Batches []struct {
			ID, State    string
			ItemCount    int `json:"item_count"`
			AppliedCount int `json:"applied_count"`
		} `json:"batches"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &list) != nil || len(list.Batches) != 1 ||
		list.Batches[0].State != "completed" || list.Batches[0].ItemCount != 20 || list.Batches[0].AppliedCount != 20 {
		t.Errorf("batch list = %d %q %q, want one completed batch of 20 applied items", code, out, errOut)
	}
	if code, out, _ = runInProcess(t, "batch", "list", "--config", cfg.Path); code != exitOK || !strings.Contains(out, "NEXT POLL") || !strings.Contains(out, "completed") {
		t.Errorf("batch list = %d %q, want a table", code, out)
	}
	if st := f.BatchStats(); st.Created != 1 || f.Calls() != 0 {
		t.Errorf("provider: %d batches, %d sync calls; want 1 batch and no sync call", st.Created, f.Calls())
	}
}

// An unknown batch, as an operator meets it: stet check and stet batch list
// name it; stet batch reconcile --adopt records the decision in the audit
// log and the batch is polled and applied; a second decision is refused.
func TestBatchReconcileAdopt(t *testing.T) {
	t.Parallel()
	f := openaifake.New(openaifake.Options{APIKey: testOpenAIKey})
	t.Cleanup(f.Close)
	f.EnqueueBatch(openaifake.BatchRouteCreate, openaifake.Fault{Kind: openaifake.ServerError}) // ambiguous, created nothing
	cfg := writeBatchConfig(t, t.TempDir(), "openai", f.URL(), "gpt-test", 2)
	file := writeNDJSON(t, cfg.Dir, 2)
	if code, out, errOut := runBinary(t, cfg.Dir, "import", "--config", cfg.Path, "--source", testSource, file); code != 0 {
		t.Fatalf("stet import = %d\n%s\n%s", code, out, errOut)
	}
	p := startStet(t, cfg, nil)
	db := openLedgerRO(t, cfg.DBPath)
	waitFor(t, 60*time.Second, "an unknown batch", p, func() bool {
		return count(t, db, `SELECT COUNT(*) FROM batches WHERE state = 'unknown'`) == 1
	})
	var batchID string
	if err := db.QueryRow(`SELECT id FROM batches`).Scan(&batchID); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := runInProcess(t, "check", "--config", cfg.Path); code != exitFailure || !strings.Contains(out, "batch_unknown") || !strings.Contains(out, batchID) {
		t.Errorf("check = %d %q, want 1 naming batch_unknown and %s", code, out, batchID)
	}
	if code, out, _ := runInProcess(t, "batch", "list", "--config", cfg.Path, "--state", "unknown"); code != exitOK || !strings.Contains(out, batchID) {
		t.Errorf("batch list --state unknown = %d %q, want %s", code, out, batchID)
	}

	// The operator finds the provider's batch for these items and adopts it.
	rows, err := db.Query(`SELECT j.public_id FROM batch_items i JOIN jobs j ON j.id = i.job_id
		WHERE i.batch_id = $1 ORDER BY j.public_id`, batchID)
	if err != nil {
		t.Fatal(err)
	}
	var items []stet.BatchItem
	for rows.Next() {
		var stored []byte
		if err := rows.Scan(&stored); err != nil {
			t.Fatal(err)
		}
		id := ledger.PublicID("job", stored)
		if id == "" {
			t.Fatalf("batch item's job public_id = %x, not a stored job ID", stored)
		}
		items = append(items, stet.BatchItem{JobID: id, Params: stet.ExtractParams{JobID: id, Prompt: stet.NewText("Classify: report"),
			SchemaName: "moderation_v1", Schema: mustRead(t, filepath.Join(quickstartDir(), "profiles", "moderation.schema.json"))}})
	}
	rows.Close()
	c, err := openai.New(openai.Config{Common: processor.Common{ID: "openai-fake", BaseURL: f.URL(), APIKey: testOpenAIKey, Model: "gpt-test", Region: "us", Retention: "30d"}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.SubmitBatch(t.Context(), stet.BatchSubmit{BatchID: batchID, Items: items, BeforeCreate: func(context.Context, string) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runInProcess(t, "batch", "reconcile", "--config", cfg.Path, "--actor", "ops-test", "--adopt", h.ProviderID, batchID)
	if code != exitOK {
		t.Fatalf("reconcile --adopt = %d %q %q", code, out, errOut)
	}
	waitFor(t, 60*time.Second, "2 records and the batch applied", p, func() bool {
		return count(t, db, `SELECT COUNT(*) FROM review_records`) == 2 &&
			count(t, db, `SELECT COUNT(*) FROM batches WHERE applied_at IS NOT NULL`) >= 1
	})
	if n := count(t, db, `SELECT COUNT(*) FROM audit_log WHERE action = 'batch.reconcile.adopt' AND object_id = $1 AND actor = 'ops-test'`, batchID); n != 1 {
		t.Errorf("audit entries = %d, want 1", n)
	}
	if n := count(t, db, `SELECT COUNT(*) FROM batches WHERE provider_batch_id = $1 AND applied_at IS NOT NULL`, h.ProviderID); n != 1 {
		t.Errorf("applied adopted batches = %d, want 1", n)
	}
	if st := f.BatchStats(); st.Created != 1 {
		t.Errorf("batches at the provider = %d, want 1 (stet submitted nothing itself)", st.Created)
	}
	if code, _, _ := runInProcess(t, "batch", "reconcile", "--config", cfg.Path, "--resubmit", batchID); code != exitFailure {
		t.Errorf("reconcile of an applied batch = %d, want 1", code)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
