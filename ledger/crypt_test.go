package ledger_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/seal"
)

func keyring(t *testing.T, keys ...seal.MasterKey) *seal.Keyring {
	t.Helper()
	k, err := seal.NewKeyring(keys)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func mk(id string, b byte) seal.MasterKey {
	return seal.MasterKey{ID: id, Key: bytes.Repeat([]byte{b}, seal.KeySize)}
}

// commitOne accepts, extracts and commits one report and returns its job.
func commitOne(t *testing.T, db *ledger.DB, ext, text, delivery string) ledger.AcceptResult {
	t.Helper()
	res := accept(t, db, ext, 1, text, delivery)
	token, n, err := claim(t, db, res.JobID, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := save(db, res.JobID, token, n); err != nil {
		t.Fatal(err)
	}
	commit(t, db, res.JobID)
	return res
}

// The rows a sealed report leaves, and that the ledger reads them back.
func TestEncryptedRowsSealedAndRead(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		ctx := context.Background()
		db.UseKeyring(keyring(t, mk("k1", 1)))
		if err := db.CheckKeys(ctx, t0); err != nil {
			t.Fatal(err)
		}
		res := commitOne(t, db, "r-enc", "CANARY-L1 text", "d1")
		for _, q := range []string{
			`SELECT COUNT(*) FROM revisions WHERE text NOT LIKE 'stet:v1:%'`,
			`SELECT COUNT(*) FROM artifacts WHERE raw NOT LIKE 'stet:v1:%' OR output NOT LIKE 'stet:v1:%'`,
			`SELECT COUNT(*) FROM review_records WHERE classification NOT LIKE 'stet:v1:%'`,
			`SELECT COUNT(*) FROM revisions WHERE text LIKE '%CANARY-L1%'`,
		} {
			if n := count(t, db, q); n != 0 {
				t.Errorf("%s = %d, want 0", q, n)
			}
		}
		if n := count(t, db, `SELECT COUNT(*) FROM report_keys WHERE report_id = (SELECT id FROM reports WHERE public_id = $1) AND key_id = 'k1'`,
			ledger.StoredID(res.ReportID)); n != 1 {
			t.Errorf("report_keys = %d, want 1 under k1", n)
		}
		w, err := db.LoadWork(ctx, db.Writer(), res.JobID)
		if err != nil || w.Text.Reveal() != "CANARY-L1 text" {
			t.Fatalf("LoadWork = %v; want the plaintext", err)
		}
		recs, _, err := db.ListReview(ctx, ledger.ReviewFilter{Tenant: "demo"})
		if err != nil || len(recs) != 1 || string(recs[0].Classification) != `{"category":"none"}` {
			t.Fatalf("ListReview = %v, %v; want the opened classification", recs, err)
		}
		// The data key destroyed: the report's values no longer open, and
		// reads say so instead of returning ciphertext.
		if err := ledger.ShredReportKey(ctx, db.Writer(), res.ReportID); err != nil {
			t.Fatal(err)
		}
		if ok, err := ledger.ReportKeyExists(ctx, db.Writer(), res.ReportID); ok || err != nil {
			t.Fatalf("ReportKeyExists after ShredReportKey = %v, %v", ok, err)
		}
		// Reads of what is left say it is gone, never show ciphertext, and
		// never fail a stage or a whole list.
		if w, err := db.LoadWork(ctx, db.Writer(), res.JobID); err != nil || !w.TextPurged || w.Text.Reveal() != "" {
			t.Errorf("LoadWork after the shred = %v; want the text purged", err)
		}
		if recs, _, err := db.ListReview(ctx, ledger.ReviewFilter{Tenant: "demo"}); err != nil || len(recs) != 1 || recs[0].Classification != nil {
			t.Errorf("ListReview after the shred = %v, %v; want the record without content", recs, err)
		}
		var raw string
		_ = db.Writer().QueryRow(`SELECT text FROM revisions WHERE report_id = (SELECT id FROM reports WHERE public_id = $1)`,
			ledger.StoredID(res.ReportID)).Scan(&raw)
		if _, err := db.OpenSealed(ctx, res.ReportID, "revisions.text", "", raw, true); !errors.Is(err, ledger.ErrKeyDestroyed) {
			t.Errorf("OpenSealed after the shred = %v, want ErrKeyDestroyed", err)
		}
	})
}

// Encryption turned on later: plaintext rows keep reading; new rows of an
// old report get a data key; rekey seals the rest and, after a rotation,
// rewraps every data key so the old key can go; a wrong or missing key is
// refused at the check.
func TestRekeyAndKeyChecks(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		ctx := context.Background()
		if err := db.CheckKeys(ctx, t0); err != nil {
			t.Fatalf("CheckKeys on a plaintext ledger without keys = %v", err)
		}
		old := commitOne(t, db, "r-old", "plain old text", "d1")
		accept(t, db, "r-old2", 1, "second plain text", "d2")

		k1 := keyring(t, mk("k1", 1))
		db.UseKeyring(k1)
		if err := db.CheckKeys(ctx, t0); err != nil {
			t.Fatal(err)
		}
		if w, err := db.LoadWork(ctx, db.Writer(), old.JobID); err != nil || w.Text.Reveal() != "plain old text" {
			t.Fatalf("LoadWork of a plaintext row = %v", err)
		}
		// A new revision of the old report: sealed under a new data key.
		rev2 := accept(t, db, "r-old", 2, "new sealed text", "d3")
		if n := count(t, db, `SELECT COUNT(*) FROM revisions WHERE report_id = (SELECT id FROM reports WHERE public_id = $1) AND text LIKE 'stet:v1:%'`,
			ledger.StoredID(rev2.ReportID)); n != 1 {
			t.Errorf("sealed revisions of the old report = %d, want 1", n)
		}
		// Before the rekey the ledger holds plain hashes beside blind
		// ones: a redelivery, a new revision and a lookup by external ID
		// still find the report written before.
		if again := accept(t, db, "r-old", 1, "plain old text", "d1"); again.Outcome != ledger.OutcomeDuplicate || again.JobID != old.JobID {
			t.Errorf("redelivery of d1 before the rekey = %+v, want the old job", again)
		}
		if rev2.ReportID != old.ReportID {
			t.Errorf("revision 2 made report %s, want the old report %s", rev2.ReportID, old.ReportID)
		}
		pending, err := db.RekeyPending(ctx)
		// Sealed: two revisions, the artifact, the record, two external
		// IDs; made blind: two reports, two revisions, two deliveries.
		if err != nil || pending != 12 {
			t.Errorf("RekeyPending = %d, %v; want 12", pending, err)
		}
		var seen []int
		res, err := db.Rekey(ctx, ledger.RekeyParams{Batch: 1, Actor: "test", Progress: func(n int) { seen = append(seen, n) }})
		if err != nil || res.Sealed != 6 || res.Blinded != 6 || res.Rewrapped != 0 {
			t.Fatalf("Rekey = %+v, %v; want 6 sealed and 6 blinded", res, err)
		}
		if len(seen) == 0 || seen[len(seen)-1] != 12 {
			t.Errorf("progress = %v, want it to end at 12", seen)
		}
		for _, q := range []string{
			`SELECT COUNT(*) FROM reports WHERE (sealed & 5) <> 5`,
			`SELECT COUNT(*) FROM revisions WHERE (sealed & 4) = 0`,
			`SELECT COUNT(*) FROM deliveries WHERE (sealed & 4) = 0`,
			`SELECT COUNT(*) FROM index_key WHERE converted_at IS NULL`,
		} {
			if n := count(t, db, q); n != 0 {
				t.Errorf("%s = %d after Rekey, want 0", q, n)
			}
		}
		if again := accept(t, db, "r-old2", 1, "second plain text", "d2"); again.Outcome != ledger.OutcomeDuplicate {
			t.Errorf("redelivery of d2 after the rekey = %+v, want a duplicate", again)
		}
		if r, err := db.GetReport(ctx, ledger.ReportLookup{Tenant: "demo", SourceID: "reports", ExternalID: "r-old", Now: t0}); err != nil ||
			r.Report.ID != old.ReportID || r.Report.ExternalID != "r-old" || len(r.Revisions) != 2 {
			t.Errorf("GetReport by external ID after the rekey = %+v, %v", r, err)
		}
		for _, q := range []string{
			`SELECT COUNT(*) FROM revisions WHERE text NOT LIKE 'stet:v1:%'`,
			`SELECT COUNT(*) FROM artifacts WHERE output NOT LIKE 'stet:v1:%' OR raw NOT LIKE 'stet:v1:%'`,
			`SELECT COUNT(*) FROM review_records WHERE classification NOT LIKE 'stet:v1:%'`,
		} {
			if n := count(t, db, q); n != 0 {
				t.Errorf("%s = %d after Rekey, want 0", q, n)
			}
		}
		if n, _ := db.RekeyPending(ctx); n != 0 {
			t.Errorf("RekeyPending after Rekey = %d, want 0", n)
		}

		// Rotation: k2 seals, k1 opens; Rekey rewraps all three data keys.
		db.UseKeyring(keyring(t, mk("k2", 2), mk("k1", 1)))
		if err := db.CheckKeys(ctx, t0); err != nil {
			t.Fatal(err)
		}
		res, err = db.Rekey(ctx, ledger.RekeyParams{Batch: 2, Actor: "test"})
		if err != nil || res.Rewrapped != 3 || res.Sealed != 0 || res.Blinded != 0 {
			t.Fatalf("Rekey to k2 = %+v, %v; want 3 rewrapped (2 data keys, the blind-index key)", res, err)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM index_key WHERE key_id = 'k2'`); n != 1 {
			t.Errorf("blind-index key under k2 = %d, want 1", n)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM report_keys WHERE key_id = 'k2'`); n != 2 {
			t.Errorf("data keys under k2 = %d, want 2", n)
		}
		// k1 gone: everything still opens.
		db.UseKeyring(keyring(t, mk("k2", 2)))
		if err := db.CheckKeys(ctx, t0); err != nil {
			t.Fatalf("CheckKeys with k1 removed after the rekey = %v", err)
		}
		if w, err := db.LoadWork(ctx, db.Writer(), old.JobID); err != nil || w.Text.Reveal() != "plain old text" {
			t.Fatalf("LoadWork with k2 alone = %v", err)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM audit_log WHERE action IN ('encryption.rekey.start', 'encryption.rekey')`); n != 4 {
			t.Errorf("rekey audit entries = %d, want 4", n)
		}

		for _, tt := range []struct {
			name string
			keys *seal.Keyring
			want string
		}{
			{"wrong key under a known id", keyring(t, mk("k2", 9)), "wrong key"},
			{"the wrapping key missing", keyring(t, mk("k3", 3)), "k2, which is not configured"},
			{"no keys at all", nil, "sealed values"},
		} {
			db.UseKeyring(tt.keys)
			if err := db.CheckKeys(ctx, t0); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s: CheckKeys = %v, want an error with %q", tt.name, err, tt.want)
			}
		}
		// Without keys a sealed value is refused, never shown.
		db.UseKeyring(nil)
		if _, err := db.LoadWork(ctx, db.Writer(), old.JobID); !errors.Is(err, ledger.ErrNoKeyring) {
			t.Errorf("LoadWork without keys = %v, want ErrNoKeyring", err)
		}
	})
}
