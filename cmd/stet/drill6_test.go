package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet/internal/crash"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// TestDrill6KillAtEachRecoveryPoint is docs/design.md §10 drill 6 on the real
// binary: kill -9 at each recovery point, restart, and the job ends with one
// report, one job, one artifact and one authoritative record, with no
// provider call after an artifact exists.
//
// The restarted process resumes orphaned stages at once, but the killed
// process's River rows stay "running" until River's rescuer retries them
// (rescue_after, leader election, then every 30 s); the test waits for that
// too, because a rescued orphan must find its work done rather than call
// the provider again. A subtest may take tens of seconds; the four run in
// parallel.
func TestDrill6KillAtEachRecoveryPoint(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("drill 6 waits for River's rescuer (up to a minute); skipped with -short")
	}
	tests := []struct {
		point string
		// selfKill: STET_CRASH_AT makes the process SIGKILL itself. Otherwise
		// (mid_call) the fake holds the call and the test kills the process.
		selfKill bool
		// wantCalls is the fake's call count at the end: only a call cut
		// before any artifact existed is ever repeated.
		wantCalls int
	}{
		{point: crash.AfterAccept, selfKill: true, wantCalls: 1},
		{point: crash.MidCall, selfKill: false, wantCalls: 2},
		{point: crash.AfterArtifact, selfKill: true, wantCalls: 1},
		{point: crash.MidCommit, selfKill: true, wantCalls: 1},
	}
	body := sample(t, "report-001.json")
	text := sampleText(t, "report-001.json")
	for _, tt := range tests {
		t.Run(tt.point, func(t *testing.T) {
			t.Parallel()
			fake := openaifake.New(openaifake.Options{APIKey: testOpenAIKey})
			t.Cleanup(fake.Close)
			if tt.point == crash.MidCall {
				// Held until the client goes away: the kill cuts the call.
				fake.Enqueue(openaifake.Fault{Kind: openaifake.Delay, Delay: 10 * time.Minute})
			}
			cfg := writeConfig(t, t.TempDir(), fake.URL())

			env := map[string]string{}
			if tt.selfKill {
				env["STET_CRASH_AT"] = tt.point
			}
			first := startStet(t, cfg, env)
			webhookID := "msg_drill6_" + tt.point
			status, out, err := postReport(first.base, webhookID, body)
			if tt.point == crash.AfterAccept {
				if err == nil {
					t.Fatalf("postReport(report-001) = %d %+v, want a connection error: the process dies after the intake commit, before answering", status, out)
				}
			} else if err != nil || status != http.StatusAccepted {
				t.Fatalf("postReport(report-001) = %d, %v, want 202", status, err)
			}
			if tt.point == crash.MidCall {
				waitFor(t, 30*time.Second, "the fake to receive the call", first, func() bool { return fake.Calls() >= 1 })
				if err := first.cmd.Process.Kill(); err != nil {
					t.Fatalf("kill stet serve: %v", err)
				}
			}
			if st := first.waitExit(t, 60*time.Second); !killedBySIGKILL(st) {
				t.Fatalf("stet serve with crash point %s ended with %v, want killed by SIGKILL\nstderr tail:\n%s", tt.point, st, first.tail())
			}
			callsAtCrash := fake.Calls()
			if tt.point != crash.AfterAccept && callsAtCrash != 1 {
				t.Fatalf("fake calls at the crash = %d, want 1", callsAtCrash)
			}

			second := startStet(t, cfg, nil)
			db := openLedgerRO(t, cfg.DBPath)
			if tt.point == crash.AfterAccept {
				// The client saw a connection error, so it redelivers: the
				// delivery was committed before the crash and resolves to
				// the job already in the ledger.
				status, out, err = postReport(second.base, webhookID, body)
				if err != nil || (status != http.StatusOK && status != http.StatusAccepted) {
					t.Fatalf("redeliver(report-001) after restart = %d, %v, want 200 (duplicate) or 202", status, err)
				}
				if status == http.StatusOK && !out.Duplicate {
					t.Errorf("redeliver(report-001) = 200 with duplicate false, want duplicate true")
				}
			}
			var stored []byte
			if err := db.QueryRow(`SELECT public_id FROM jobs`).Scan(&stored); err != nil {
				t.Fatalf("read the job: %v", err)
			}
			jobID := ledger.PublicID("job", stored)
			if out.JobID != jobID {
				t.Errorf("intake answered job %q, want the ledger's job %q", out.JobID, jobID)
			}

			waitFor(t, 90*time.Second, "the job's review record", second, func() bool {
				return count(t, db, `SELECT COUNT(*) FROM review_records WHERE job_id = (SELECT id FROM jobs WHERE public_id = stet_ulid($1))`, jobID) > 0
			})

			// Every stage job River knows, the dead process's included, must
			// finish before the counts are final.
			waitFor(t, 90*time.Second, "River to finish every stage job", second, func() bool {
				return count(t, db, `SELECT COUNT(*) FROM river_job WHERE kind IN ('stet_extract', 'stet_commit')
					AND state NOT IN ('completed', 'cancelled', 'discarded')`) == 0
			})
			if n := count(t, db, `SELECT COUNT(*) FROM river_job WHERE kind IN ('stet_extract', 'stet_commit') AND state <> 'completed'`); n != 0 {
				t.Errorf("stage jobs that River gave up on or cancelled = %d, want 0", n)
			}

			counts := []struct {
				what, query string
				want        int
			}{
				{"reports", `SELECT COUNT(*) FROM reports`, 1},
				{"revisions", `SELECT COUNT(*) FROM revisions`, 1},
				{"jobs", `SELECT COUNT(*) FROM jobs`, 1},
				{"committed jobs", `SELECT COUNT(*) FROM jobs WHERE state = 'committed'`, 1},
				{"artifacts", `SELECT COUNT(*) FROM artifacts`, 1},
				{"review records", `SELECT COUNT(*) FROM review_records`, 1},
				{"authoritative extracted records", `SELECT COUNT(*) FROM review_records WHERE authoritative AND kind = 'extracted'`, 1},
				// Every provider call is an attempt row, the cut one included;
				// exactly one succeeded and its result is the artifact.
				{"attempts", `SELECT COUNT(*) FROM attempts`, tt.wantCalls},
				{"succeeded attempts", `SELECT COUNT(*) FROM attempts WHERE status = 'succeeded'`, 1},
				{"artifacts from the succeeded attempt", `SELECT COUNT(*) FROM artifacts a JOIN attempts t
					ON t.job_id = a.job_id AND t.n = a.attempt_n WHERE t.status = 'succeeded'`, 1},
				// The restarted process is alone on the file: the killed
				// process's heartbeat row went at start with its leases.
				{"worker heartbeats", `SELECT COUNT(*) FROM worker_heartbeats`, 1},
			}
			for _, c := range counts {
				if got := count(t, db, c.query); got != c.want {
					t.Errorf("%s after a kill at %s = %d, want %d", c.what, tt.point, got, c.want)
				}
			}
			if got := fake.Calls(); got != tt.wantCalls {
				t.Errorf("fake calls after a kill at %s = %d, want %d", tt.point, got, tt.wantCalls)
			}
			if got := fake.CallsContaining("juice cleanse"); got != tt.wantCalls {
				t.Errorf("fake calls carrying report-001's text = %d, want %d", got, tt.wantCalls)
			}
			code, stdout, stderr := runBinary(t, cfg.Dir, "check", "--config", cfg.Path)
			if code != exitOK || !strings.HasPrefix(stdout, "ok") {
				t.Errorf("stet check = %d, stdout %q, stderr %q; want 0 and ok", code, stdout, stderr)
			}
			assertNoText(t, text, first, second)
		})
	}
}

// assertNoText checks that no process's stderr (its JSON log) carries the
// document text.
func assertNoText(t *testing.T, text string, procs ...*stetProc) {
	t.Helper()
	for _, p := range procs {
		b, err := os.ReadFile(p.stderr)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), text[:40]) {
			t.Errorf("stderr of %s holds the document text", filepath.Base(p.stderr))
		}
	}
}
