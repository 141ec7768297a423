package ledger_test

import (
	"context"
	"encoding/hex"
	"testing"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger"
)

// With encryption on from the start, no stored hash is one a guessed value
// could be checked against: the external ID is sealed, and the identity,
// content and body hashes and the tombstone are blind-index values. The
// blind index still finds the report, answers a redelivery as a duplicate
// and a delivery of the deleted identity as gone.
func TestBlindIndexLeavesNoGuessableHash(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		ctx := context.Background()
		db.UseKeyring(keyring(t, mk("k1", 1)))
		if err := db.CheckKeys(ctx, t0); err != nil {
			t.Fatal(err)
		}
		const ext, text = "MRN-12345", "Patient note for the blind-index test."
		res := accept(t, db, ext, 1, text, "d1")
		identity := ledger.IdentityHash(stet.IdentityExternalID, ext, stet.Text{})
		body := stet.SHA256Hex([]byte("d1" + text)) // as accept() hashes the body
		content := stet.SHA256Hex([]byte(text))
		plain := func(h string) []byte { b, _ := hex.DecodeString(h); return b }
		for q, arg := range map[string]any{
			`SELECT COUNT(*) FROM reports WHERE external_id LIKE '%MRN%'`: nil,
			`SELECT COUNT(*) FROM reports WHERE (sealed & 5) <> 5`:        nil,
			`SELECT COUNT(*) FROM reports WHERE identity_hash = $1`:       plain(identity),
			`SELECT COUNT(*) FROM revisions WHERE content_sha256 = $1`:    plain(content),
			`SELECT COUNT(*) FROM deliveries WHERE body_sha256 = $1`:      plain(body),
			`SELECT COUNT(*) FROM index_key WHERE converted_at IS NULL`:   nil,
			`SELECT COUNT(*) FROM revisions WHERE (sealed & 5) <> 5`:      nil,
			`SELECT COUNT(*) FROM deliveries WHERE (sealed & 4) = 0`:      nil,
		} {
			var args []any
			if arg != nil {
				args = []any{arg}
			}
			if n := count(t, db, q, args...); n != 0 {
				t.Errorf("%s = %d, want 0", q, n)
			}
		}
		if again := accept(t, db, ext, 1, text, "d1"); again.Outcome != ledger.OutcomeDuplicate || again.JobID != res.JobID {
			t.Errorf("redelivery = %+v, want the first job", again)
		}
		if again := accept(t, db, ext, 1, text, "d2"); again.Outcome != ledger.OutcomeDuplicate || again.JobID != res.JobID {
			t.Errorf("the same revision under another webhook-id = %+v, want the first job", again)
		}
		if conflict := accept(t, db, ext, 1, "other text", "d3"); conflict.Outcome != ledger.OutcomeRevisionConflict {
			t.Errorf("other content under the same revision = %+v, want a revision conflict", conflict)
		}
		r, err := db.GetReport(ctx, ledger.ReportLookup{Tenant: "demo", SourceID: "reports", ExternalID: ext, Now: t0})
		if err != nil || r.Report.ID != res.ReportID || r.Report.ExternalID != ext {
			t.Fatalf("GetReport by external ID = %+v, %v; want %s with its external ID opened", r, err, res.ReportID)
		}
		requestDeletion(t, db, ledger.DeletionRequest{Tenant: "demo", SourceID: "reports", ExternalID: ext, Actor: "test", Now: t0})
		if n := count(t, db, `SELECT COUNT(*) FROM tombstones WHERE identity_hash = $1`,
			ledger.TombstoneHash("demo", "reports", identity)); n != 0 {
			t.Errorf("plain tombstones = %d, want 0", n)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM tombstones WHERE (sealed & 4) <> 0`); n != 1 {
			t.Errorf("blind tombstones = %d, want 1", n)
		}
		if gone := accept(t, db, ext, 2, "a later revision", "d4"); gone.Outcome != ledger.OutcomeGone {
			t.Errorf("a delivery of the deleted identity = %+v, want gone", gone)
		}
		if _, err := db.GetReport(ctx, ledger.ReportLookup{Tenant: "demo", SourceID: "reports", ExternalID: ext, Now: t0}); err == nil {
			t.Error("GetReport of the deleted identity answered a report")
		}
	})
}
