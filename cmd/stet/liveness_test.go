package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stetlabs/stet/internal/crash"
	"github.com/stetlabs/stet/internal/stetclient"
	"github.com/stetlabs/stet/lab/testdb"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// Leases tied to worker liveness, on the real binary: PostgreSQL,
// one api process and two worker processes, the default heartbeat (2s),
// dead_after (8s), job_timeout (2m) and rescue_after (5m) — River's rescue
// is far beyond every bound asserted here, so only the liveness sweep can
// meet them.

// onPostgres rewrites cfg to use a fresh PostgreSQL schema (the test is
// skipped without STET_TEST_DATABASE_URL) and the default worker timings,
// and returns a connection to it.
func onPostgres(t *testing.T, cfg *e2eConfig) *sql.DB {
	t.Helper()
	url := testdb.URL(t, ledger.Postgres)
	b, err := os.ReadFile(cfg.Path)
	if err != nil {
		t.Fatal(err)
	}
	y := strings.Replace(string(b), fmt.Sprintf("database: %q", "sqlite://"+cfg.DBPath), fmt.Sprintf("database: %q", url), 1)
	y = strings.Replace(y, "  job_timeout: 2s\n", "", 1)
	y = strings.Replace(y, "  rescue_after: 3s\n", "", 1)
	if !strings.Contains(y, url) || strings.Contains(y, "rescue_after") {
		t.Fatal("config rewrite for PostgreSQL failed")
	}
	if err := os.WriteFile(cfg.Path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// startRole starts `stet serve --role role` on cfg, like startStet.
func startRole(t *testing.T, cfg *e2eConfig, role string, env map[string]string) *stetProc {
	t.Helper()
	return startServe(t, cfg, role, env, 60*time.Second)
}

// waitUntil is waitFor without a process to watch, and reports how long
// cond took to hold.
func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	waitFor(t, limit, what, nil, cond)
	return time.Since(start)
}

// A sync stage's worker is SIGKILLed mid-call: the other worker claims the
// job within 15 s of the kill, the cut attempt is abandoned (and shows so
// in GET /v1/jobs/{id}), the provider saw two calls, and one authoritative
// record exists.
func TestLivenessSyncKillMidCall(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	inCall := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	f := openaifake.New(openaifake.Options{APIKey: testOpenAIKey, Respond: func(req openaifake.Request) string {
		if calls.Add(1) == 1 {
			once.Do(func() { close(inCall) })
			select { // the first call never answers its (killed) caller
			case <-release:
			case <-time.After(2 * time.Minute):
			}
		}
		return openaifake.MinimalInstance(req.Schema)
	}})
	t.Cleanup(f.Close)
	t.Cleanup(func() { close(release) })
	cfg := writeConfig(t, t.TempDir(), f.URL())
	db := onPostgres(t, cfg)

	api := startRole(t, cfg, "api", nil)
	w1 := startRole(t, cfg, "worker", nil)
	status, intake, err := postReport(api.base, "msg_liveness", sample(t, "report-001.json"))
	if err != nil || status != 202 {
		t.Fatalf("postReport = %d, %v, want 202", status, err)
	}
	select {
	case <-inCall:
	case <-time.After(60 * time.Second):
		t.Fatal("the first provider call never came")
	}
	startRole(t, cfg, "worker", nil) // the second worker, up before the kill
	killedAt := time.Now()
	w1.kill()

	waitUntil(t, 30*time.Second, "a second attempt", func() bool {
		return count(t, db, `SELECT COUNT(*) FROM attempts WHERE job_id = (SELECT id FROM jobs WHERE public_id = stet_ulid($1)) AND n = 2`, intake.JobID) == 1
	})
	var startedAt int64
	if err := db.QueryRow(`SELECT started_at FROM attempts WHERE job_id = (SELECT id FROM jobs WHERE public_id = stet_ulid($1)) AND n = 2`, intake.JobID).Scan(&startedAt); err != nil {
		t.Fatal(err)
	}
	claimAfter := time.UnixMicro(startedAt).Sub(killedAt)
	t.Logf("kill -> next attempt's start in the ledger: %s", claimAfter.Round(time.Millisecond))
	if claimAfter > 15*time.Second {
		t.Errorf("the job was claimed %s after its worker was killed, want within 15s", claimAfter)
	}
	waitUntil(t, 30*time.Second, "the record", func() bool {
		return count(t, db, `SELECT COUNT(*) FROM review_records WHERE authoritative`) == 1
	})
	for q, want := range map[string]int{
		`SELECT COUNT(*) FROM review_records`:                                1,
		`SELECT COUNT(*) FROM artifacts`:                                     1,
		`SELECT COUNT(*) FROM attempts WHERE n = 1 AND status = 'abandoned'`: 1,
		`SELECT COUNT(*) FROM attempts WHERE n = 2 AND status = 'succeeded'`: 1,
		`SELECT COUNT(*) FROM attempts`:                                      2,
		`SELECT COUNT(*) FROM attempts WHERE status = 'started'`:             0,
		`SELECT COUNT(*) FROM jobs WHERE state = 'committed'`:                1,
		// The dead worker's River job, and the one the sweep enqueued again
		// ahead of any backlog (priority 1 before the stages' 2).
		`SELECT COUNT(*) FROM river_job WHERE kind = 'stet_extract' AND priority = 2`: 1,
		`SELECT COUNT(*) FROM river_job WHERE kind = 'stet_extract' AND priority = 1`: 1,
	} {
		if got := count(t, db, q); got != want {
			t.Errorf("%s = %d, want %d", q, got, want)
		}
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("provider calls = %d, want 2 (the abandoned one counted once)", n)
	}
	var view struct {
		Attempts []struct {
			N      int    `json:"n"`
			Status string `json:"status"`
		} `json:"attempts"`
	}
	c := &stetclient.Client{Base: api.base, Token: testToken, HTTP: httpClient}
	if err := c.GetJSON(context.Background(), "/v1/jobs/"+intake.JobID, &view); err != nil {
		t.Fatal(err)
	}
	if len(view.Attempts) != 2 || view.Attempts[0].Status != "abandoned" || view.Attempts[1].Status != "succeeded" {
		t.Errorf("GET /v1/jobs/{id} attempts = %+v, want abandoned then succeeded", view.Attempts)
	}
}

// startBatchCluster imports n batch-mode reports and starts one api and two
// workers with env (a crash point) on PostgreSQL.
func startBatchCluster(t *testing.T, cfg *e2eConfig, n int, env map[string]string) (*sql.DB, []*stetProc) {
	t.Helper()
	db := onPostgres(t, cfg)
	file := writeNDJSON(t, cfg.Dir, n)
	if code, out, errOut := runBinary(t, cfg.Dir, "import", "--config", cfg.Path, "--source", testSource, file); code != 0 {
		t.Fatalf("stet import = %d\n%s\n%s", code, out, errOut)
	}
	startRole(t, cfg, "api", nil)
	return db, []*stetProc{startRole(t, cfg, "worker", env), startRole(t, cfg, "worker", env)}
}

// Both workers die between the provider's batch create and persisting its
// ID (one at the crash point, the other SIGKILLed at once); two new workers
// reconcile the batch and commit every report within 30 s of the restart,
// with one batch at the provider and one record per report.
func TestLivenessBatchBothWorkersKilledAfterSubmit(t *testing.T) {
	t.Parallel()
	f := openaifake.New(openaifake.Options{APIKey: testOpenAIKey})
	t.Cleanup(f.Close)
	cfg := writeBatchConfig(t, t.TempDir(), "openai", f.URL(), "gpt-test", 3)
	db, workers := startBatchCluster(t, cfg, 3, map[string]string{"STET_CRASH_AT": crash.AfterBatchSubmit})
	waitUntil(t, 60*time.Second, "a worker's crash after the batch create", func() bool {
		return workers[0].exited() || workers[1].exited()
	})
	for _, w := range workers {
		w.kill()
	}
	if n := f.BatchStats().Created; n != 1 {
		t.Fatalf("batches at the provider after the crash = %d, want 1", n)
	}
	if n := count(t, db, `SELECT COUNT(*) FROM batches WHERE provider_batch_id IS NULL AND submit_started_at IS NOT NULL`); n != 1 {
		t.Fatalf("batches in flight without a provider ID = %d, want 1", n)
	}
	restart := time.Now()
	startRole(t, cfg, "worker", nil)
	startRole(t, cfg, "worker", nil)
	waitUntil(t, 60*time.Second, "3 committed reports", func() bool {
		return count(t, db, `SELECT COUNT(*) FROM jobs WHERE state = 'committed'`) == 3
	})
	took := time.Since(restart)
	t.Logf("restart -> all committed: %s", took.Round(time.Millisecond))
	if took > 30*time.Second {
		t.Errorf("committed %s after the restart, want within 30s", took)
	}
	if st := f.BatchStats(); st.Created != 1 || st.CreateCalls != 1 {
		t.Errorf("fake batch stats = %+v, want 1 batch from 1 creating call", st)
	}
	for q, want := range map[string]int{
		`SELECT COUNT(*) FROM batches`:                            1,
		`SELECT COUNT(*) FROM artifacts`:                          3,
		`SELECT COUNT(*) FROM review_records`:                     3,
		`SELECT COUNT(*) FROM review_records WHERE authoritative`: 3,
		`SELECT COUNT(*) FROM (SELECT report_id FROM review_records GROUP BY report_id HAVING COUNT(*) > 1) d`: 0,
		`SELECT COUNT(*) FROM attempts WHERE status = 'started'`:                                               0,
	} {
		if got := count(t, db, q); got != want {
			t.Errorf("%s = %d, want %d", q, got, want)
		}
	}
}

// A worker dies mid-apply, and so does the one that takes the batch over
// (both carry the crash point); after a restart every item is applied
// once: one artifact and one record per report.
func TestLivenessBatchKillMidApply(t *testing.T) {
	t.Parallel()
	f := openaifake.New(openaifake.Options{APIKey: testOpenAIKey})
	t.Cleanup(f.Close)
	const n = 250 // more than one apply chunk (200)
	cfg := writeBatchConfig(t, t.TempDir(), "openai", f.URL(), "gpt-test", n)
	db, workers := startBatchCluster(t, cfg, n, map[string]string{"STET_CRASH_AT": crash.MidApply})
	waitUntil(t, 60*time.Second, "a worker's crash mid-apply", func() bool {
		return workers[0].exited() || workers[1].exited()
	})
	if applied := count(t, db, `SELECT COUNT(*) FROM batch_items WHERE applied_at IS NOT NULL`); applied == 0 || applied >= n {
		t.Fatalf("items applied at the crash = %d, want some but not all of %d", applied, n)
	}
	// The survivor takes the batch over within seconds, applies the rest
	// and dies at the crash point too (before the batch is marked applied).
	took := waitUntil(t, 30*time.Second, "the survivor's takeover", func() bool {
		return count(t, db, `SELECT COUNT(*) FROM batch_items WHERE applied_at IS NOT NULL`) == n
	})
	t.Logf("first crash -> every item applied by the survivor: %s", took.Round(time.Millisecond))
	for _, w := range workers {
		w.kill()
	}
	restart := time.Now()
	startRole(t, cfg, "worker", nil)
	startRole(t, cfg, "worker", nil)
	waitUntil(t, 60*time.Second, "the batch applied", func() bool {
		return count(t, db, `SELECT COUNT(*) FROM batches WHERE applied_at IS NOT NULL`) == 1 &&
			count(t, db, `SELECT COUNT(*) FROM jobs WHERE state = 'committed'`) == n
	})
	t.Logf("restart -> batch applied and all committed: %s", time.Since(restart).Round(time.Millisecond))
	for q, want := range map[string]int{
		`SELECT COUNT(*) FROM artifacts`:                                                            n,
		`SELECT COUNT(*) FROM batch_items WHERE outcome = 'succeeded'`:                              n,
		`SELECT COUNT(*) FROM attempts WHERE batch_id IS NOT NULL`:                                  n,
		`SELECT COUNT(*) FROM review_records`:                                                       n,
		`SELECT COUNT(*) FROM review_records WHERE authoritative`:                                   n,
		`SELECT COUNT(*) FROM (SELECT job_id FROM artifacts GROUP BY job_id HAVING COUNT(*) > 1) d`: 0,
	} {
		if got := count(t, db, q); got != want {
			t.Errorf("%s = %d, want %d", q, got, want)
		}
	}
	if st := f.BatchStats(); st.Created != 1 {
		t.Errorf("fake stats = %+v, want 1 batch", st)
	}
}
