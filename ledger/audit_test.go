package ledger_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

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
