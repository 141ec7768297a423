package pipeline_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/lab/drill/recovery"
	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/ledger/ledgertest"
	"github.com/stetlabs/stet/processor/openai/openaifake"
	"github.com/stetlabs/stet/seal"
)

func testKeyring(t *testing.T, ids ...string) *seal.Keyring {
	t.Helper()
	var keys []seal.MasterKey
	for i, id := range ids {
		keys = append(keys, seal.MasterKey{ID: id, Key: bytes.Repeat([]byte{byte(i + 1)}, seal.KeySize)})
	}
	k, err := seal.NewKeyring(keys)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// canaryColumns counts, in every text, JSON and blob column of every table
// of the ledger, the rows that hold marker.
func canaryColumns(t *testing.T, e *stettest.Env, marker string) map[string]int {
	t.Helper()
	ctx := context.Background()
	found, cols, err := ledgertest.Holding(ctx, e.DB, marker)
	if err != nil {
		t.Fatal(err)
	}
	if cols < 20 {
		t.Fatalf("found %d columns to scan; the scan is broken", cols)
	}
	return found
}

// fileHolds reports whether the SQLite file or its WAL holds marker.
func fileHolds(t *testing.T, e *stettest.Env, marker string) []string {
	t.Helper()
	path, ok := strings.CutPrefix(e.URL, "sqlite://")
	if !ok {
		return nil // a server's files are not this process's to read
	}
	var in []string
	for _, f := range []string{path, path + "-wal"} {
		b, err := os.ReadFile(f)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(marker)) {
			in = append(in, filepath.Base(f))
		}
	}
	return in
}

// With encryption on, neither the text's canary nor the model output's is
// anywhere in the ledger — no column of any table, not the bytes of the
// SQLite file or its WAL — before any deletion, while every read through
// the API shows the plaintext. After the report's deletion its ciphertext,
// read raw before the rows went, no longer opens.
func TestEncryptionAtRest(t *testing.T) {
	t.Parallel()
	const textCanary, outCanary, noteCanary = "CANARY-TXT-41c7", "CANARY-OUT-9b2e", "CANARY-NOTE-5d1a"
	e := stettest.New(t, stettest.Options{
		Keyring: testKeyring(t, "k1"),
		FakeOptions: openaifake.Options{Respond: func(openaifake.Request) string {
			return `{"category":"unsafe_medical_advice","severity":"high","action":"remove","labels":["unsafe_medical_advice"],"rationale":"` + outCanary + `"}`
		}},
	})
	ctx := context.Background()
	r := e.Deliver(stettest.SourceReports, "msg_enc1", stettest.Report{ExternalID: "report-enc", Revision: 1,
		Text: "Stop taking insulin. " + textCanary, Metadata: json.RawMessage(`{"ward":"` + textCanary + `"}`)})
	if r.Status != http.StatusAccepted {
		t.Fatalf("deliver = %d %s", r.Status, r.Body)
	}
	e.WaitJob(r.JobID, stet.JobCommitted)
	rec := e.Record(r.JobID)
	var decided api.RecordView
	if st, b := e.Do(http.MethodPost, "/v1/review/"+rec.ID+"/decision", stettest.ReviewerToken,
		map[string]any{"decision": "approve", "note": "checked " + noteCanary}, &decided); st != http.StatusOK {
		t.Fatalf("decide = %d %s", st, b)
	}

	// Reads show the plaintext.
	var got api.RecordView
	if st, b := e.Do(http.MethodGet, "/v1/review/"+rec.ID, stettest.ReaderToken, nil, &got); st != http.StatusOK ||
		!strings.Contains(string(got.Classification), outCanary) || !strings.Contains(got.Note, noteCanary) {
		t.Fatalf("GET /v1/review/%s = %d %s; want the plaintext classification and note", rec.ID, st, b)
	}
	var list struct {
		Records []api.RecordView `json:"records"`
	}
	if st, b := e.Do(http.MethodGet, "/v1/review", stettest.ReaderToken, nil, &list); st != http.StatusOK || !strings.Contains(string(b), outCanary) {
		t.Fatalf("GET /v1/review = %d %s; want the plaintext classification", st, b)
	}
	text, err := e.DB.JobText(ctx, "demo", r.JobID)
	if err != nil || !strings.Contains(text.Text.Reveal(), textCanary) {
		t.Fatalf("JobText = %v; want the plaintext", err)
	}
	q, _, err := e.DB.ListQueue(ctx, ledger.QueueFilter{Tenant: "demo", Category: "unsafe_medical_advice"})
	if err != nil || len(q) != 1 || q[0].ID != rec.ID {
		t.Fatalf("ListQueue(category) = %d records, %v; want the record (the category is matched after opening)", len(q), err)
	}
	counts, err := e.DB.CountQueue(ctx, "demo")
	if err != nil || counts.Category["unsafe_medical_advice"] != 1 {
		t.Fatalf("CountQueue = %+v, %v; want 1 unsafe_medical_advice", counts, err)
	}

	// Nowhere at rest, before any deletion.
	for _, m := range []string{textCanary, outCanary, noteCanary} {
		if found := canaryColumns(t, e, m); len(found) != 0 {
			t.Errorf("%s in the ledger at rest: %v", m, found)
		}
		if in := fileHolds(t, e, m); len(in) != 0 {
			t.Errorf("%s in the bytes of %v", m, in)
		}
	}

	// The raw copies, as a backup or a dead tuple would keep them, each
	// with the binding it was sealed under (ledger.RevisionBinding,
	// ledger.ArtifactID, the record's public ID).
	type raw struct {
		column, rowID, stored string
		sealed                bool // the column's bit in its row's sealed column
	}
	var copies []raw
	read := func(column, query string, binding func(legacy string, key []byte) string) {
		rows, err := e.DB.Writer().QueryContext(ctx, query, r.ReportID)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var c raw
			var legacy string
			var key []byte
			c.column = column
			if err := rows.Scan(&legacy, &key, &c.stored, &c.sealed); err != nil {
				t.Fatal(err)
			}
			c.rowID = binding(legacy, key)
			copies = append(copies, c)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	revision := func(legacy string, content []byte) string {
		return ledger.RevisionBinding(legacy, r.ReportID, hex.EncodeToString(content))
	}
	artifact := func(legacy string, job []byte) string { return ledger.ArtifactID(legacy, ledger.PublicID("job", job)) }
	record := func(_ string, rec []byte) string { return ledger.PublicID("rec", rec) }
	const ofReport = `(SELECT id FROM reports WHERE public_id = stet_ulid($1))`
	read("revisions.text", `SELECT COALESCE(legacy_id, ''), content_sha256, text, (sealed & 1) <> 0 FROM revisions WHERE report_id = `+ofReport, revision)
	read("revisions.metadata", `SELECT COALESCE(legacy_id, ''), content_sha256, metadata, (sealed & 2) <> 0 FROM revisions WHERE report_id = `+ofReport, revision)
	read("artifacts.raw", `SELECT COALESCE(a.legacy_id, ''), j.public_id, a.raw, (a.sealed & 1) <> 0 FROM artifacts a JOIN jobs j ON j.id = a.job_id
		WHERE j.report_id = `+ofReport, artifact)
	read("artifacts.output", `SELECT COALESCE(a.legacy_id, ''), j.public_id, a.output, (a.sealed & 2) <> 0 FROM artifacts a JOIN jobs j ON j.id = a.job_id
		WHERE j.report_id = `+ofReport, artifact)
	read("review_records.classification", `SELECT '', public_id, classification, (sealed & 1) <> 0 FROM review_records WHERE report_id = `+ofReport, record)
	read("review_records.note", `SELECT '', public_id, note, (sealed & 2) <> 0 FROM review_records WHERE report_id = `+ofReport, record)
	if len(copies) != 6 {
		t.Fatalf("raw copies = %d, want 6", len(copies))
	}
	for _, c := range copies {
		if !c.sealed || !strings.HasPrefix(c.stored, seal.SealedPrefix) {
			t.Errorf("%s is not sealed (flag %v)", c.column, c.sealed)
		}
		if _, err := e.DB.OpenSealed(ctx, r.ReportID, c.column, c.rowID, c.stored, true); err != nil {
			t.Errorf("OpenSealed(%s) before the deletion = %v", c.column, err)
		}
	}
	// A ciphertext moved to another column does not open.
	if _, err := e.DB.OpenSealed(ctx, r.ReportID, "revisions.metadata", copies[0].rowID, copies[0].stored, true); !errors.Is(err, seal.ErrOpen) {
		t.Errorf("text opened as metadata = %v, want ErrOpen", err)
	}

	var acc api.DeletionAccepted
	if st, b := e.Do(http.MethodDelete, "/v1/reports/"+r.ReportID, stettest.OperatorToken, nil, &acc); st != http.StatusAccepted {
		t.Fatalf("DELETE = %d %s", st, b)
	}
	d := recovery.WaitDeletion(t, e, acc.DeletionID, "unresolved", "done")
	if s := recovery.TaskStates(d)["encryption_key"]; s != "done" {
		t.Errorf("encryption_key task = %s, want done", s)
	}
	if n := e.Count("report_keys", "report_id = (SELECT id FROM reports WHERE public_id = stet_ulid($1))", r.ReportID); n != 0 {
		t.Errorf("report_keys rows of the report = %d, want 0", n)
	}
	for _, c := range copies {
		if v, err := e.DB.OpenSealed(ctx, r.ReportID, c.column, c.rowID, c.stored, true); !errors.Is(err, ledger.ErrKeyDestroyed) || v != "" {
			t.Errorf("OpenSealed(%s) after the deletion = %q, %v; want ErrKeyDestroyed", c.column, v, err)
		}
	}
	for _, m := range []string{textCanary, outCanary, noteCanary} {
		if in := fileHolds(t, e, m); len(in) != 0 {
			t.Errorf("%s in the bytes of %v after the deletion", m, in)
		}
	}
}

// The same through a provider batch: the batch apply seals the artifact.
func TestEncryptionAtRestBatch(t *testing.T) {
	t.Parallel()
	const textCanary = "CANARY-BATCH-77aa"
	e := stettest.New(t, stettest.Options{Keyring: testKeyring(t, "k1")})
	r := e.Deliver(stettest.SourceBatch, "msg_encb", stettest.Report{ExternalID: "report-encb", Revision: 1, Text: "Stop taking insulin. " + textCanary})
	e.WaitJob(r.JobID, stet.JobCommitted)
	rec := e.Record(r.JobID)
	if len(rec.Classification) == 0 || !json.Valid(rec.Classification) {
		t.Fatalf("record classification = %s; want the opened JSON", rec.Classification)
	}
	if n := e.Count("artifacts", "output LIKE $1 AND (sealed & 2) <> 0", seal.SealedPrefix+"%"); n != 1 {
		t.Errorf("sealed artifacts = %d, want 1", n)
	}
	if found := canaryColumns(t, e, textCanary); len(found) != 0 {
		t.Errorf("canary in the ledger at rest: %v", found)
	}
	if in := fileHolds(t, e, textCanary); len(in) != 0 {
		t.Errorf("canary in the bytes of %v", in)
	}
}
