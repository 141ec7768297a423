package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/internal/stetclient"
	"github.com/stetlabs/stet/ledger"
)

// With encryption on, an external ID such as MRN-12345 appears nowhere in
// the SQLite file or its WAL, and neither does a hash a guessed MRN could
// be checked against (the identity hash, in bytes or hex, and the
// tombstone after a deletion): the external ID is sealed and the hashes
// are blind-index values. The API still finds the report by its external
// ID and answers a redelivery as a duplicate.
func TestExternalIDNotInTheFileWithEncryption(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := writeRulesConfig(t, dir, configParts{})
	turnOnEncryption(t, path)
	cfg := &e2eConfig{Dir: dir, Path: path, DBPath: filepath.Join(dir, "stet-data", "stet.db")}
	p := startStet(t, cfg, map[string]string{envKeyK1: testKeyK1})

	const mrn = "MRN-12345"
	body, _ := json.Marshal(map[string]any{"external_id": mrn, "revision": 1, "text": "Take ten times the dose."})
	status, in, err := postReport(p.base, "msg_mrn_1", body)
	if err != nil || status != http.StatusAccepted {
		t.Fatalf("POST report = %d, %v", status, err)
	}
	c := &stetclient.Client{Base: p.base, Token: testToken, HTTP: httpClient}
	ctx := context.Background()
	var job struct {
		State string `json:"state"`
	}
	waitFor(t, 30*time.Second, "the job committed", p, func() bool {
		return c.GetJSON(ctx, "/v1/jobs/"+in.JobID, &job) == nil && job.State == "committed"
	})
	if status, again, err := postReport(p.base, "msg_mrn_1", body); err != nil || status != http.StatusOK || again.JobID != in.JobID {
		t.Errorf("redelivery = %d %+v %v, want 200 and job %s", status, again, err, in.JobID)
	}
	var report struct {
		ReportID   string `json:"report_id"`
		ExternalID string `json:"external_id"`
	}
	if err := c.GetJSON(ctx, "/v1/sources/"+testSource+"/reports/"+mrn, &report); err != nil || report.ReportID != in.ReportID || report.ExternalID != mrn {
		t.Errorf("GET report by external ID = %+v, %v; want %s", report, err, in.ReportID)
	}

	identity := ledger.IdentityHash(stet.IdentityExternalID, mrn, stet.Text{})
	raw, _ := hex.DecodeString(identity)
	tombstone := ledger.TombstoneHash("demo", testSource, identity)
	grep := func(when string) {
		t.Helper()
		for _, name := range []string{"stet.db", "stet.db-wal"} {
			b, err := os.ReadFile(filepath.Join(dir, "stet-data", name))
			if err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			for what, needle := range map[string][]byte{
				"the external ID": []byte(mrn), "its identity hash": raw, "its identity hash in hex": []byte(identity),
				"its plain tombstone": []byte(tombstone),
			} {
				if bytes.Contains(b, needle) {
					t.Errorf("%s: %s holds %s", when, name, what)
				}
			}
		}
	}
	grep("after intake")

	req, _ := http.NewRequest(http.MethodDelete, p.base+"/v1/sources/"+testSource+"/reports/"+mrn, nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	res, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusAccepted && res.StatusCode != http.StatusOK {
		t.Fatalf("DELETE report = %d", res.StatusCode)
	}
	if status, _, err := postReport(p.base, "msg_mrn_2", body); err != nil || status != http.StatusGone {
		t.Errorf("a delivery of the deleted MRN = %d, %v; want 410", status, err)
	}
	grep("after the deletion")
}
