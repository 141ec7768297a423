package ledger_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger"
)

func TestWebSessions(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		ctx := context.Background()
		s := ledger.WebSession{IDHash: "aa00000000000000000000000000000000000000000000000000000000000000", Tenant: "demo",
			Role: stet.RoleReviewer, Actor: "token:rev", TokenHash: "bb", CSRFHash: "cc",
			CreatedAt: t0, LastSeenAt: t0, IdleUntil: t0.Add(15 * time.Minute), ExpiresAt: t0.Add(12 * time.Hour)}
		if err := db.CreateWebSession(ctx, s); err != nil {
			t.Fatal(err)
		}
		got, err := db.WebSession(ctx, s.IDHash)
		if err != nil || got.Actor != "token:rev" || got.Role != stet.RoleReviewer || !got.IdleUntil.Equal(s.IdleUntil) {
			t.Fatalf("WebSession = %+v, %v", got, err)
		}
		// A touch pushes the idle logoff; a touch after it is refused.
		if err := db.TouchWebSession(ctx, s.IDHash, t0.Add(10*time.Minute), t0.Add(25*time.Minute)); err != nil {
			t.Fatalf("TouchWebSession = %v", err)
		}
		if err := db.TouchWebSession(ctx, s.IDHash, t0.Add(26*time.Minute), t0.Add(41*time.Minute)); !errors.Is(err, stet.ErrNotFound) {
			t.Fatalf("TouchWebSession after idle = %v, want ErrNotFound", err)
		}
		// Both or neither of token hash and OIDC subject: refused.
		bad := s
		bad.IDHash, bad.OIDCSubject = "dd", "sub-1"
		if err := db.CreateWebSession(ctx, bad); err == nil {
			t.Fatal("CreateWebSession with a token hash and a subject succeeded")
		}
		oidc := s
		oidc.IDHash, oidc.TokenHash, oidc.OIDCSubject, oidc.Actor = "ee00000000000000", "", "sub-1", "oidc:sub-1"
		oidc.IdleUntil = t0.Add(time.Hour)
		if err := db.CreateWebSession(ctx, oidc); err != nil {
			t.Fatal(err)
		}
		// Within the grace the idle row stays, for its owner's next request
		// to end with the reason; past it the sweep ends and audits it.
		if n, err := db.SweepWebSessions(ctx, t0.Add(30*time.Minute)); err != nil || n != 0 {
			t.Fatalf("SweepWebSessions 5 min after the idle logoff = %d, %v, want 0", n, err)
		}
		if _, err := db.WebSession(ctx, s.IDHash); err != nil {
			t.Fatalf("idle session read within the sweep's grace = %v, want the row", err)
		}
		n, err := db.SweepWebSessions(ctx, t0.Add(25*time.Minute+ledger.WebSessionSweepGrace))
		if err != nil || n != 1 {
			t.Fatalf("SweepWebSessions = %d, %v, want 1 (the idle one)", n, err)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM audit_log WHERE action = 'web.idle_logoff' AND detail = 'sweep'`); n != 1 {
			t.Fatalf("idle logoff audit rows from the sweep = %d, want 1", n)
		}
		if _, err := db.WebSession(ctx, s.IDHash); !errors.Is(err, stet.ErrNotFound) {
			t.Fatalf("swept session read = %v, want ErrNotFound", err)
		}
		live, _ := db.WebSession(ctx, oidc.IDHash)
		if err := db.EndWebSession(ctx, live, "web.logout", t0.Add(31*time.Minute)); err != nil {
			t.Fatal(err)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM web_sessions`); n != 0 {
			t.Fatalf("web_sessions = %d after logout, want 0", n)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM audit_log WHERE action IN ('web.login', 'web.logout')`); n != 3 {
			t.Fatalf("login/logout audit rows = %d, want 3", n)
		}
	})
}

func TestQueueReads(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		ctx := context.Background()
		var recs []string
		for _, ext := range []string{"r1", "r2", "r3"} {
			job := accept(t, db, ext, 1, "text of "+ext, "d-"+ext).JobID
			recs = append(recs, extractAndCommit(t, db, job))
		}
		manualJob := accept(t, db, "r4", 1, "text four", "d-r4").JobID
		tok, _, err := claim(t, db, manualJob, 0, t0)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.InTx(ctx, func(tx *sql.Tx) error {
			_, err := db.MarkManual(ctx, tx, manualJob, tok, stet.FailureRefusal, t0)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		all, next, err := db.ListQueue(ctx, ledger.QueueFilter{Tenant: "demo", Limit: 2})
		if err != nil || len(all) != 2 || next == "" {
			t.Fatalf("ListQueue page 1 = %d records, next %q, %v", len(all), next, err)
		}
		if all[0].Kind != stet.RecordManual {
			t.Fatalf("newest first: first record is %s, want the manual one", all[0].Kind)
		}
		rest, next2, err := db.ListQueue(ctx, ledger.QueueFilter{Tenant: "demo", Limit: 2, Before: next})
		if err != nil || len(rest) != 2 || next2 != "" || rest[1].ID != recs[0] {
			t.Fatalf("ListQueue page 2 = %d records, next %q, %v", len(rest), next2, err)
		}
		byCat, _, err := db.ListQueue(ctx, ledger.QueueFilter{Tenant: "demo", Category: "none", Kind: stet.RecordExtracted})
		if err != nil || len(byCat) != 3 {
			t.Fatalf("ListQueue category=none = %d, %v, want 3", len(byCat), err)
		}
		byClass, _, _ := db.ListQueue(ctx, ledger.QueueFilter{Tenant: "demo", FailureClass: stet.FailureRefusal})
		if len(byClass) != 1 || byClass[0].Kind != stet.RecordManual {
			t.Fatalf("ListQueue failure_class=refusal = %d records, want the manual one", len(byClass))
		}
		if other, _, _ := db.ListQueue(ctx, ledger.QueueFilter{Tenant: "other"}); len(other) != 0 {
			t.Fatalf("another tenant's queue holds %d records", len(other))
		}
		c, err := db.CountQueue(ctx, "demo")
		if err != nil || c.Total != 4 || c.Kind["manual"] != 1 || c.Category["none"] != 3 || c.FailureClass["refusal"] != 1 || c.State["pending"] != 4 {
			t.Fatalf("CountQueue = %+v, %v", c, err)
		}
		txt, err := db.JobText(ctx, "demo", manualJob)
		if err != nil || txt.Text.Reveal() != "text four" || !txt.PurgedAt.IsZero() {
			t.Fatalf("JobText = %+v, %v", txt, err)
		}
		if _, err := db.JobText(ctx, "other", manualJob); !errors.Is(err, stet.ErrNotFound) {
			t.Fatalf("JobText of another tenant = %v, want ErrNotFound", err)
		}
		h, err := db.ReportHistory(ctx, "demo", all[0].ReportID)
		if err != nil || len(h) != 1 || h[0].RecordID != all[0].ID || !h[0].Authoritative {
			t.Fatalf("ReportHistory = %+v, %v", h, err)
		}
	})
}
