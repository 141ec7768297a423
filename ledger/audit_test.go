package ledger_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stetlabs/stet/ledger"
)

func appendEntries(t *testing.T, db *ledger.DB, n int, actor string) {
	t.Helper()
	for i := range n {
		err := db.Audit(context.Background(), ledger.AuditEntry{Tenant: "demo", Actor: actor, Action: "job.read", ObjectType: "job",
			ObjectID: fmt.Sprintf("job_%d", i), Route: "GET /v1/jobs/{job_id}", RemoteAddr: "127.0.0.1:1", RequestID: "req_1", Now: t0})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// allowTampering lifts the append-only triggers, as someone with the
// database owner's rights could.
func allowTampering(t *testing.T, db *ledger.DB) {
	t.Helper()
	stmts := []string{`DROP TRIGGER audit_log_no_update`, `DROP TRIGGER audit_log_no_delete`}
	if db.Dialect() == ledger.Postgres {
		stmts = []string{`ALTER TABLE audit_log DISABLE TRIGGER USER`}
	}
	for _, s := range stmts {
		if _, err := db.Writer().Exec(s); err != nil {
			t.Fatal(err)
		}
	}
}

// The audit log is a SHA-256 hash chain: intact, it verifies; an edited
// row, a removed row and a removed last row are each the first broken link.
func TestAuditChainDetectsTampering(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		tamper string
		wantID int64
	}{
		{"edited", `UPDATE audit_log SET object_id = 'job_x' WHERE id = 3`, 3},
		{"removed", `DELETE FROM audit_log WHERE id = 3`, 3},
		{"hash rewritten", `UPDATE audit_log SET object_id = 'job_x', hash = 'ab' WHERE id = 3`, 3},
		{"last removed", `DELETE FROM audit_log WHERE id = 5`, 5},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			eachDialect(t, func(t *testing.T, db *ledger.DB) {
				ctx := context.Background()
				appendEntries(t, db, 5, "token:operator")
				rep, err := db.VerifyAuditChain(ctx)
				if err != nil || rep.Broken != nil || rep.Checked != 5 {
					t.Fatalf("VerifyAuditChain before tampering = %+v, %v; want 5 intact rows", rep, err)
				}
				allowTampering(t, db)
				if _, err := db.Writer().Exec(tt.tamper); err != nil {
					t.Fatal(err)
				}
				rep, err = db.VerifyAuditChain(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if rep.Broken == nil || rep.Broken.ID != tt.wantID {
					t.Errorf("VerifyAuditChain after %q = %+v, want broken at row %d", tt.tamper, rep.Broken, tt.wantID)
				}
			})
		})
	}
}

// Concurrent writers extend one chain: no fork, no gap.
func TestAuditChainConcurrentWriters(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				appendEntries(t, db, 20, fmt.Sprintf("token:w%d", w))
			}()
		}
		wg.Wait()
		rep, err := db.VerifyAuditChain(context.Background())
		if err != nil || rep.Broken != nil || rep.Checked != 160 {
			t.Errorf("VerifyAuditChain after 8 concurrent writers = %+v, %v; want 160 intact rows", rep, err)
		}
	})
}

// legacyHash is the hash of a row written before migration 0023, which had
// no outcome: the chain's first format, which such rows keep.
func legacyHash(id int64, at time.Time, actor, objectID, prev string) string {
	b, _ := json.Marshal([]any{id, at.UnixMicro(), "demo", actor, "job.read", "job", objectID, "", "GET /v1/jobs/{job_id}", "127.0.0.1:1", "req_1", prev})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Rows written before migration 0023 (no outcome) still verify, and rows
// written since carry an outcome their hash covers: blanking a new row's
// outcome, changing it, or giving an old row one is a broken link. A
// request's route, remote address and request ID come from its context.
func TestAuditChainCoversOutcome(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		tamper string
		wantID int64
	}{
		{"new row's outcome blanked", `UPDATE audit_log SET outcome = '' WHERE id = 4`, 4},
		{"new row's outcome changed", `UPDATE audit_log SET outcome = 'ok' WHERE id = 5`, 5},
		{"old row given an outcome", `UPDATE audit_log SET outcome = 'ok' WHERE id = 2`, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			eachDialect(t, func(t *testing.T, db *ledger.DB) {
				ctx := context.Background()
				w := db.Writer()
				// Three rows as a build before 0023 wrote them.
				prev := ""
				for id := int64(1); id <= 3; id++ {
					h := legacyHash(id, t0, "token:old", fmt.Sprintf("job_%d", id), prev)
					if _, err := w.Exec(`INSERT INTO audit_log (id, at, tenant_id, actor, action, object_type, object_id, route, remote_addr,
							request_id, prev_hash, hash) VALUES ($1, $2, 'demo', 'token:old', 'job.read', 'job', $3, 'GET /v1/jobs/{job_id}', '127.0.0.1:1', 'req_1', $4, $5)`,
						id, t0.UnixMicro(), fmt.Sprintf("job_%d", id), prev, h); err != nil {
						t.Fatal(err)
					}
					prev = h
				}
				if _, err := w.Exec(`UPDATE audit_chain SET last_id = 3, last_hash = $1 WHERE id = 1`, prev); err != nil {
					t.Fatal(err)
				}
				// Two rows now: one served, one denied, the request's fields
				// from the context.
				rctx := ledger.WithAuditRequest(ctx, ledger.AuditRequest{Route: "POST /v1/dispatch/pause", RemoteAddr: "127.0.0.1:9", RequestID: "req_9"})
				if err := db.SetPause(rctx, ledger.Pause{Scope: "tenant:demo", Reason: "maintenance", PausedBy: "token:operator", PausedAt: t0}, "demo"); err != nil {
					t.Fatal(err)
				}
				if err := db.Audit(rctx, ledger.AuditEntry{Tenant: "demo", Actor: "token:reader", Action: "denied.forbidden", ObjectType: "route",
					Outcome: ledger.AuditDenied, Now: t0}); err != nil {
					t.Fatal(err)
				}
				rep, err := db.VerifyAuditChain(ctx)
				if err != nil || rep.Broken != nil || rep.Checked != 5 {
					t.Fatalf("VerifyAuditChain over 3 old and 2 new rows = %+v, %v; want 5 intact", rep, err)
				}
				rows, _, err := db.AuditRows(ctx, ledger.AuditFilter{Tenant: "demo"})
				if err != nil || len(rows) != 5 {
					t.Fatalf("AuditRows = %d rows, %v; want 5", len(rows), err)
				}
				if p := rows[3]; p.Action != "dispatch.pause" || p.Route != "POST /v1/dispatch/pause" || p.RemoteAddr != "127.0.0.1:9" ||
					p.RequestID != "req_9" || p.Outcome != ledger.AuditOK {
					t.Errorf("the pause's row = %+v, want the context's route, address and request, outcome ok", p)
				}
				if rows[4].Outcome != ledger.AuditDenied || rows[0].Outcome != ledger.AuditOK {
					t.Errorf("outcomes = %q (new, denied), %q (old job.read); want denied, ok", rows[4].Outcome, rows[0].Outcome)
				}
				allowTampering(t, db)
				if _, err := w.Exec(tt.tamper); err != nil {
					t.Fatal(err)
				}
				rep, err = db.VerifyAuditChain(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if rep.Broken == nil || rep.Broken.ID != tt.wantID {
					t.Errorf("VerifyAuditChain after %q = %+v, want broken at row %d", tt.tamper, rep.Broken, tt.wantID)
				}
			})
		})
	}
}

// AuditRollup counts repeats of one key on one chained row, under
// concurrent writers; another key is another row; a count cannot be
// lowered or removed; an empty tenant is never every tenant's log.
func TestAuditRollupCounts(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		ctx := context.Background()
		e := ledger.AuditEntry{Tenant: "demo", Actor: "anonymous", Action: "denied.intake.bad_signature", ObjectType: "source",
			ObjectID: "reports", Outcome: ledger.AuditDenied, Now: t0}
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 20 {
					if err := db.AuditRollup(ctx, "k1", e); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if err := db.AuditRollup(ctx, "k2", e); err != nil {
			t.Fatal(err)
		}
		rows, next, err := db.AuditRows(ctx, ledger.AuditFilter{Tenant: "demo"})
		if err != nil || next != 0 || len(rows) != 2 || rows[0].Count != 160 || rows[1].Count != 1 {
			t.Fatalf("AuditRows = %+v, %d, %v; want two rows counting 160 and 1", rows, next, err)
		}
		if rep, err := db.VerifyAuditChain(ctx); err != nil || rep.Broken != nil || rep.Checked != 2 {
			t.Errorf("VerifyAuditChain = %+v, %v; want 2 intact rows", rep, err)
		}
		for _, s := range []string{`UPDATE audit_counts SET hits = 1 WHERE rollup_key = 'k1'`, `DELETE FROM audit_counts WHERE rollup_key = 'k1'`} {
			if _, err := db.Writer().Exec(s); err == nil {
				t.Errorf("%s succeeded; want it refused", s)
			}
		}
		if _, _, err := db.AuditRows(ctx, ledger.AuditFilter{}); err == nil {
			t.Error("AuditRows with an empty tenant succeeded; want it refused")
		}
	})
}
