package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet/internal/stetclient"
	"github.com/stetlabs/stet/lab/testdb"
	"github.com/stetlabs/stet/ledger"
)

// Text and a reviewer's note that happen to begin as a sealed value does
// ("stet:v1:dk…:") are plain text on a ledger without encryption: the
// delivery becomes a record, the decision answers 200, the queue and the
// UI keep answering 200 and show both verbatim. Turning encryption on,
// stet rekey seals them like any other plaintext, and they still read
// verbatim. Before, whether a value was sealed was guessed from its
// prefix: the job waited forever and the tenant's queue answered 500.
func TestForgedSealedPrefixIsPlainText(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"sqlite", "postgres"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := writeRulesConfig(t, dir, configParts{})
			cfg := &e2eConfig{Dir: dir, Path: path, DBPath: filepath.Join(dir, "stet-data", "stet.db")}
			var db *sql.DB
			if dialect == "postgres" {
				u := testdb.URL(t, ledger.Postgres)
				withDatabase(t, path, u)
				var err error
				if db, err = sql.Open("pgx", u); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Close() })
			}
			p := startStet(t, cfg, nil)
			if db == nil {
				db = openLedgerRO(t, cfg.DBPath)
			}
			const (
				text = "stet:v1:dk0011:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA Take ten times the dose."
				note = "stet:v1:dk00:AAAA"
			)
			body, _ := json.Marshal(map[string]any{"external_id": "forged-1", "revision": 1, "text": text})
			status, in, err := postReport(p.base, "msg_forged_1", body)
			if err != nil || status != http.StatusAccepted {
				t.Fatalf("POST report = %d, %v", status, err)
			}
			c := &stetclient.Client{Base: p.base, Token: testToken, HTTP: httpClient}
			ctx := context.Background()
			var job struct {
				State          string  `json:"state"`
				ReviewRecordID *string `json:"review_record_id"`
			}
			waitFor(t, 30*time.Second, "the job's record", p, func() bool {
				return c.GetJSON(ctx, "/v1/jobs/"+in.JobID, &job) == nil && job.State == "committed" && job.ReviewRecordID != nil
			})
			recID := *job.ReviewRecordID

			decision, _ := json.Marshal(map[string]string{"decision": "approve", "note": note})
			req, _ := http.NewRequest(http.MethodPost, p.base+"/v1/review/"+recID+"/decision", bytes.NewReader(decision))
			req.Header.Set("Authorization", "Bearer "+testToken)
			req.Header.Set("Content-Type", "application/json")
			res, err := httpClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Fatalf("POST decision = %d, want 200", res.StatusCode)
			}

			check := func(when string, p *stetProc) {
				t.Helper()
				c := &stetclient.Client{Base: p.base, Token: testToken, HTTP: httpClient}
				var page struct {
					Records []struct {
						ID   string `json:"id"`
						Note string `json:"note"`
					} `json:"records"`
				}
				if err := c.GetJSON(ctx, "/v1/review", &page); err != nil {
					t.Fatalf("%s: GET /v1/review: %v", when, err)
				}
				if len(page.Records) != 1 || page.Records[0].ID != recID || page.Records[0].Note != note {
					t.Errorf("%s: GET /v1/review = %+v, want record %s with note %q", when, page.Records, recID, note)
				}
				client := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
				_, session, _ := uiSignIn(t, client, p.base, testToken)
				for path, want := range map[string][]string{"/ui/review?state=decided": {recID}, "/ui/review/" + recID: {text, note}} {
					req, _ := http.NewRequest(http.MethodGet, p.base+path, nil)
					req.AddCookie(session)
					res, err := client.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					html, _ := io.ReadAll(res.Body)
					res.Body.Close()
					if res.StatusCode != http.StatusOK {
						t.Errorf("%s: GET %s = %d, want 200", when, path, res.StatusCode)
					}
					for _, w := range want {
						if !strings.Contains(string(html), w) {
							t.Errorf("%s: GET %s does not show %q", when, path, w)
						}
					}
				}
			}
			check("without encryption", p)
			sealedRows := func() (revisions, notes int) {
				return count(t, db, `SELECT COUNT(*) FROM revisions WHERE (sealed & 1) <> 0`),
					count(t, db, `SELECT COUNT(*) FROM review_records WHERE (sealed & 2) <> 0`)
			}
			if r, n := sealedRows(); r != 0 || n != 0 {
				t.Errorf("without encryption: %d revisions and %d notes flagged sealed, want 0", r, n)
			}
			p.kill()

			// Encryption turned on: rekey seals both like any plaintext.
			turnOnEncryption(t, path)
			if code, out, stderr := runInProcess(t, "rekey", "--config", path, "--json"); code != exitOK {
				t.Fatalf("rekey = %d %s %s", code, out, stderr)
			}
			if r, n := sealedRows(); r != 1 || n != 1 {
				t.Errorf("after rekey: %d revisions and %d notes flagged sealed, want 1 and 1", r, n)
			}
			if n := count(t, db, `SELECT COUNT(*) FROM revisions WHERE text LIKE '%Take ten times%'`); n != 0 {
				t.Errorf("revisions still holding the text in plaintext after rekey = %d, want 0", n)
			}
			if n := count(t, db, `SELECT COUNT(*) FROM review_records WHERE note = '`+note+`'`); n != 0 {
				t.Errorf("notes still in plaintext after rekey = %d, want 0", n)
			}
			// The external ID is sealed and the identity hash made a
			// blind-index value too.
			if n := count(t, db, `SELECT COUNT(*) FROM reports WHERE external_id = 'forged-1' OR (sealed & 5) <> 5`); n != 0 {
				t.Errorf("reports with a plaintext external ID or a plain identity hash after rekey = %d, want 0", n)
			}
			check("after rekey", startStet(t, cfg, map[string]string{envKeyK1: testKeyK1}))
		})
	}
}

// appendConfig appends yaml to the config at path.
func appendConfig(t *testing.T, path, yaml string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString(yaml)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

// turnOnEncryption appends an encryption: section with key k1 (read from
// envKeyK1) to the config at path.
func turnOnEncryption(t *testing.T, path string) {
	t.Helper()
	appendConfig(t, path, "encryption:\n  keys:\n    - {id: k1, key_env: "+envKeyK1+"}\n")
}
