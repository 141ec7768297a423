package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// stet manual --scope: jobs that wait while dispatch is paused become
// manual review records, once; their River jobs are cancelled, so after
// the unpause no provider call is made.
func TestManualConvertsWaitingJobs(t *testing.T) {
	t.Parallel()
	fake := openaifake.New(openaifake.Options{APIKey: testOpenAIKey})
	t.Cleanup(fake.Close)
	cfg := writeConfig(t, t.TempDir(), fake.URL())
	if code, _, stderr := runInProcess(t, "migrate", "--config", cfg.Path); code != exitOK {
		t.Fatalf("migrate = %d: %s", code, stderr)
	}
	if code, _, stderr := runInProcess(t, "pause", "--config", cfg.Path, "--scope", "all", "--reason", "provider incident"); code != exitOK {
		t.Fatalf("pause = %d: %s", code, stderr)
	}
	p := startStet(t, cfg, nil)
	const n = 3
	for i := range n {
		body := fmt.Appendf(nil, `{"external_id":"manual-%d","revision":1,"text":"some text %d"}`, i, i)
		if status, _, err := postReport(p.base, fmt.Sprintf("msg_manual_%d", i), body); err != nil || status != http.StatusAccepted {
			t.Fatalf("postReport(%d) = %d, %v, want 202", i, status, err)
		}
	}
	db := openLedgerRO(t, cfg.DBPath)
	waitFor(t, 30*time.Second, "every job waiting", p, func() bool {
		return count(t, db, `SELECT COUNT(*) FROM jobs WHERE state = 'waiting'`) == n
	})

	for _, tt := range []struct {
		args []string
		code int
	}{
		{[]string{"manual"}, exitUsage},
		{[]string{"manual", "--scope", "galaxy:far"}, exitUsage},
	} {
		args := append([]string{tt.args[0], "--config", cfg.Path}, tt.args[1:]...)
		if code, stdout, stderr := runInProcess(t, args...); code != tt.code {
			t.Errorf("run(%q) = %d, stdout %q, stderr %q; want %d", args, code, stdout, stderr, tt.code)
		}
	}
	for i, want := range []int{n, 0} { // the second run finds nothing left to convert
		code, stdout, stderr := runInProcess(t, "manual", "--config", cfg.Path, "--scope", "tenant:demo", "--reason", "route to the approved human process", "--json")
		var out struct {
			Scope     string `json:"scope"`
			Converted int    `json:"converted"`
		}
		if code != exitOK || json.Unmarshal([]byte(stdout), &out) != nil || out.Scope != "tenant:demo" || out.Converted != want {
			t.Fatalf("run %d: stet manual = %d, stdout %q, stderr %q; want 0 and converted %d", i+1, code, stdout, stderr, want)
		}
	}
	if got := count(t, db, `SELECT COUNT(*) FROM review_records WHERE kind = 'manual'`); got != n {
		t.Errorf("manual review records = %d, want %d", got, n)
	}
	if got := count(t, db, `SELECT COUNT(*) FROM jobs WHERE state = 'manual'`); got != n {
		t.Errorf("manual jobs = %d, want %d", got, n)
	}
	// A River job a worker held at the conversion ends when that execution
	// does: cancelled if it snoozes, completed if it found the job manual
	// (River runs without a listener, so it cannot interrupt it).
	waitFor(t, 30*time.Second, "every extract River job finalized", p, func() bool {
		return count(t, db, `SELECT COUNT(*) FROM river_job WHERE kind = 'stet_extract' AND state IN ('cancelled', 'completed')`) == n
	})
	// stet inspect labels a manual record's time "manual", not
	// "committed", and shows the record's kind and authoritative flag.
	code, stdout, stderr := runInProcess(t, "inspect", "--config", cfg.Path, testSource+"/manual-0")
	if code != exitOK || !regexp.MustCompile(`(?m)^  manual +\d{4}-`).MatchString(stdout) || strings.Contains(stdout, "  committed ") ||
		!regexp.MustCompile(`(?m)^  review record rec_\w+  kind manual  authoritative (true|false)`).MatchString(stdout) {
		t.Errorf("stet inspect of a manual job = %d, stdout %q, stderr %q; want a manual stage time and the record's kind", code, stdout, stderr)
	}
	if got := count(t, db, `SELECT COUNT(*) FROM audit_log WHERE action = 'job.manual' AND actor = 'cli'`); got != n {
		t.Errorf("job.manual audit entries = %d, want %d", got, n)
	}
	if code, stdout, stderr := runInProcess(t, "audit", "verify", "--config", cfg.Path); code != exitOK {
		t.Errorf("audit verify = %d, stdout %q, stderr %q; want 0", code, stdout, stderr)
	}

	if code, _, stderr := runInProcess(t, "unpause", "--config", cfg.Path, "--scope", "all"); code != exitOK {
		t.Fatalf("unpause = %d: %s", code, stderr)
	}
	// A report delivered after the unpause gets its record: dispatch runs
	// again, and by then it has had every chance to call for the
	// converted jobs too.
	if status, _, err := postReport(p.base, "msg_manual_control", []byte(`{"external_id":"manual-control","revision":1,"text":"after the unpause"}`)); err != nil || status != http.StatusAccepted {
		t.Fatalf("postReport(control) = %d, %v, want 202", status, err)
	}
	waitFor(t, 30*time.Second, "the report delivered after the unpause committed", p, func() bool {
		return count(t, db, `SELECT COUNT(*) FROM jobs WHERE state = 'committed'`) == 1
	})
	if c := fake.Calls(); c != 1 {
		t.Errorf("provider calls after the unpause = %d, want 1, the new report's (converted jobs never run)", c)
	}
	if got := count(t, db, `SELECT COUNT(*) FROM jobs WHERE state = 'manual'`); got != n {
		t.Errorf("manual jobs after the unpause = %d, want %d", got, n)
	}
}
