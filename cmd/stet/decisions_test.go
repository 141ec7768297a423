package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/lab/testdb"
	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// eventLog is a destination that keeps the type and sequence of every
// record event it is sent, once per webhook-id.
type eventLog struct {
	mu     sync.Mutex
	seen   map[string]bool
	events []string // "type#sequence"
}

func (l *eventLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var ev struct {
		Type     string `json:"type"`
		Sequence int64  `json:"sequence"`
	}
	if json.Unmarshal(b, &ev) != nil {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if id := r.Header.Get("webhook-id"); !l.seen[id] {
		l.seen[id] = true
		l.events = append(l.events, fmt.Sprintf("%s#%d", ev.Type, ev.Sequence))
	}
}

func (l *eventLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.events...)
}

// call sends method to url with the operator's token and body, and
// decodes the answer into out when it is 200.
func call(t *testing.T, method, url, body string, out any) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK && out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
	}
	return resp.StatusCode, string(b)
}

// Decisions on the real binary, on each dialect (docs/design.md §18):
// approve, reopen, then an override give two decisions in
// GET /v1/review/{id}, the artifact unchanged; the destination receives
// committed, decided, reopened, decided with a growing sequence; an
// override that breaks the schema's conditional rules is refused with the
// validator's message; a revision's record that a newer revision
// superseded leaves the pending queue unless asked.
func TestDecisionsReopenAndSuperseded(t *testing.T) {
	t.Parallel()
	for _, dialect := range testdb.Dialects() {
		t.Run(string(dialect), func(t *testing.T) {
			t.Parallel()
			fake := openaifake.New(openaifake.Options{APIKey: testOpenAIKey})
			t.Cleanup(fake.Close)
			recv := &eventLog{seen: map[string]bool{}}
			dest := httptest.NewServer(recv)
			t.Cleanup(dest.Close)
			cfg := writeConfig(t, t.TempDir(), fake.URL())
			db := rewriteConfig(t, cfg, dialect, func(y string) string {
				return strings.Replace(y, "    mode: sync\n", fmt.Sprintf("    mode: sync\n    destinations: [{id: recv, url: %q, secret_env: STET_E2E_DEST_SECRET, max_age: 1h}]\n", dest.URL), 1)
			})
			secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("decisions-test-destination-key!!"))
			p := startStet(t, cfg, map[string]string{"STET_E2E_DEST_SECRET": secret})
			if db == nil {
				db = openLedgerRO(t, cfg.DBPath)
			}

			status, in, err := postReport(p.base, "msg_dec_1", sample(t, "report-001.json"))
			if err != nil || status != http.StatusAccepted {
				t.Fatalf("postReport = %d, %v, want 202", status, err)
			}
			var job api.JobView
			waitFor(t, 30*time.Second, "the record", p, func() bool {
				getJSON(t, p.base+"/v1/jobs/"+in.JobID, &job)
				return job.ReviewRecordID != nil
			})
			rec := p.base + "/v1/review/" + *job.ReviewRecordID
			var before api.RecordView
			getJSON(t, rec, &before)
			var artifact string
			if err := db.QueryRow(`SELECT output FROM artifacts`).Scan(&artifact); err != nil {
				t.Fatal(err)
			}

			if st, body := call(t, http.MethodPost, rec+"/decision", `{"decision":"approve"}`, nil); st != http.StatusOK {
				t.Fatalf("approve = %d %s", st, body)
			}
			var reopened api.RecordView
			if st, body := call(t, http.MethodPost, rec+"/reopen", `{"reason":"second opinion asked"}`, &reopened); st != http.StatusOK || reopened.State != "pending" {
				t.Fatalf("reopen = %d %s, want 200 and pending", st, body)
			}
			if st, body := call(t, http.MethodPost, rec+"/reopen", `{"reason":"again"}`, nil); st != http.StatusConflict {
				t.Errorf("reopen of a pending record = %d %s, want 409", st, body)
			}
			if st, body := call(t, http.MethodPost, rec+"/reopen", `{"reason":""}`, nil); st != http.StatusBadRequest {
				t.Errorf("reopen without a reason = %d %s, want 400", st, body)
			}
			// Category self_harm with no labels and severity none breaks the
			// schema's conditional rules.
			bad := `{"decision":"override","classification":{"category":"self_harm","severity":"none","action":"allow","labels":[],"rationale":"no rule matched"}}`
			if st, body := call(t, http.MethodPost, rec+"/decision", bad, nil); st != http.StatusBadRequest ||
				!strings.Contains(body, "invalid-classification") || !strings.Contains(body, "/labels") || !strings.Contains(body, "/severity") {
				t.Errorf("an inconsistent override = %d %s, want 400 invalid-classification naming /labels and /severity", st, body)
			}
			good := `{"decision":"override","classification":{"category":"self_harm","severity":"high","action":"escalate","labels":["self_harm"],"rationale":"a plan is stated"},"note":"checked twice"}`
			if st, body := call(t, http.MethodPost, rec+"/decision", good, nil); st != http.StatusOK {
				t.Fatalf("override = %d %s", st, body)
			}
			var after api.RecordView
			getJSON(t, rec, &after)
			if len(after.Decisions) != 2 || after.Decisions[0].Decision != "approve" || after.Decisions[1].Decision != "override" ||
				after.Decisions[1].Note != "checked twice" || !bytes.Equal(after.Decisions[0].Classification, before.Classification) ||
				!strings.Contains(string(after.Decisions[1].Classification), `"a plan is stated"`) {
				t.Errorf("decisions = %+v, want approve (of the extracted classification) then override (with its note)", after.Decisions)
			}
			if after.State != "decided" || after.Decision == nil || *after.Decision != "override" {
				t.Errorf("record = %s %v, want decided, override", after.State, after.Decision)
			}
			var artifactAfter string
			if err := db.QueryRow(`SELECT output FROM artifacts`).Scan(&artifactAfter); err != nil || artifactAfter != artifact {
				t.Errorf("artifact after the override = %q (%v), want it unchanged %q", artifactAfter, err, artifact)
			}
			want := []string{"record.committed#1", "record.decided#2", "record.reopened#3", "record.decided#4"}
			waitFor(t, 30*time.Second, "four record events at the destination", p, func() bool { return len(recv.all()) >= len(want) })
			if got := recv.all(); strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("destination events = %v, want %v", got, want)
			}
			if n := count(t, db, `SELECT COUNT(*) FROM audit_log WHERE action = 'review.reopen'`); n != 1 {
				t.Errorf("review.reopen audit rows = %d, want 1", n)
			}

			// A newer revision supersedes the pending record of the first.
			status, in1, err := postReport(p.base, "msg_dec_2", sample(t, "report-002.json"))
			if err != nil || status != http.StatusAccepted {
				t.Fatalf("postReport = %d, %v, want 202", status, err)
			}
			var r2 map[string]any
			_ = json.Unmarshal(sample(t, "report-002.json"), &r2)
			r2["revision"] = 2
			body2, _ := json.Marshal(r2)
			status, in2, err := postReport(p.base, "msg_dec_3", body2)
			if err != nil || status != http.StatusAccepted {
				t.Fatalf("postReport revision 2 = %d, %v, want 202", status, err)
			}
			var j1, j2 api.JobView
			waitFor(t, 30*time.Second, "both revisions' records", p, func() bool {
				getJSON(t, p.base+"/v1/jobs/"+in1.JobID, &j1)
				getJSON(t, p.base+"/v1/jobs/"+in2.JobID, &j2)
				return j1.ReviewRecordID != nil && j2.ReviewRecordID != nil
			})
			var page struct {
				Records []api.RecordView `json:"records"`
			}
			ids := func() map[string]bool {
				m := map[string]bool{}
				for _, r := range page.Records {
					m[r.ID] = r.Superseded
				}
				return m
			}
			getJSON(t, p.base+"/v1/review?state=pending", &page)
			if got := ids(); len(got) != 1 || got[*j2.ReviewRecordID] {
				t.Errorf("pending queue = %v, want only revision 2's record %s, not superseded", got, *j2.ReviewRecordID)
			}
			getJSON(t, p.base+"/v1/review?state=pending&superseded=true", &page)
			if got := ids(); len(got) != 2 || !got[*j1.ReviewRecordID] || got[*j2.ReviewRecordID] {
				t.Errorf("pending queue with superseded = %v, want both, revision 1's %s superseded", got, *j1.ReviewRecordID)
			}
		})
	}
}
