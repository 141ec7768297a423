package ledger_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/testdb"
	"github.com/stetlabs/stet/ledger"
)

// legacyLedger is a ledger at migration 0018 with rows as a stet before
// 0019 wrote them: text IDs everywhere, hex hashes, sealed values bound to
// the old row IDs.
type legacyLedger struct {
	policy                   *stet.Policy
	report, deleted, batched string
	job1, job2, job3         string
	record1                  string
	artifact1, revision1     string
	contentHash1             string
	inputHash                string
	text1, output1, class1   string
	orphanPolicyHash         string
}

// Plaintext a sender wrote in the sealed format, before 0022 recorded which
// values are sealed: the first names a data key that is not its report's,
// the second belongs to a report that has no data key. 0022 leaves both
// plaintext.
const (
	forgedText2 = "stet:v1:dk0011:AAAAAAAAAAAAAAAA Revision two, in plaintext."
	forgedText3 = "stet:v1:dk0011:AAAAAAAAAAAAAAAA Batched text."
)

// writeLegacy fills a ledger at 0018 by hand, with SQL both dialects take.
func writeLegacy(t *testing.T, db *ledger.DB) legacyLedger {
	t.Helper()
	ctx := context.Background()
	at := t0.UnixMicro()
	l := legacyLedger{
		policy:    &stet.Policy{ID: "standard", Processors: []string{"p1"}, ReplayHorizon: 48 * time.Hour},
		report:    stet.NewID("rep", t0),
		deleted:   stet.NewID("rep", t0),
		batched:   stet.NewID("rep", t0),
		job1:      stet.NewID("job", t0),
		job2:      stet.NewID("job", t0),
		job3:      stet.NewID("job", t0),
		record1:   stet.NewID("rec", t0),
		artifact1: stet.NewID("art", t0),
		revision1: stet.NewID("rev", t0),
		text1:     "Revision one of the legacy report.",
		output1:   `{"category":"none"}`,
		class1:    `{"category":"none"}`,
		inputHash: stet.SHA256Hex([]byte("minimized input")),
	}
	l.contentHash1 = stet.SHA256Hex([]byte(l.text1))
	l.orphanPolicyHash = stet.SHA256Hex([]byte("a policy whose content was never recorded"))
	content, err := json.Marshal(l.policy)
	if err != nil {
		t.Fatal(err)
	}
	kr := keyring(t, mk("k1", 1))
	dk, wrapped, err := kr.NewDataKey(l.report)
	if err != nil {
		t.Fatal(err)
	}
	seal := func(v, bind string) string {
		s, err := dk.Seal([]byte(v), bind)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	identity := func(ext string) string { return ledger.IdentityHash(stet.IdentityExternalID, ext, stet.Text{}) }
	revision2 := stet.NewID("rev", t0)
	revision3 := stet.NewID("rev", t0)
	deletedRevision := stet.NewID("rev", t0)
	deletion := stet.NewID("del", t0)
	stmts := []struct {
		q    string
		args []any
	}{
		{`INSERT INTO policy_versions (hash, policy_id, content, first_seen) VALUES ($1, 'standard', $2, $3)`,
			[]any{l.policy.Hash(), string(content), at}},
		// report: revision 1 committed (its values sealed), revision 2 accepted
		{`INSERT INTO reports (id, tenant_id, source_id, external_id, identity_hash, created_at, updated_at)
			VALUES ($1, 'demo', 'reports', 'legacy-1', $2, $3, $3)`, []any{l.report, identity("legacy-1"), at}},
		{`INSERT INTO report_keys (report_id, data_key_id, key_id, wrapped, created_at) VALUES ($1, $2, $3, $4, $5)`,
			[]any{l.report, wrapped.DataKeyID, wrapped.KeyID, wrapped.Wrapped, at}},
		{`INSERT INTO revisions (id, report_id, revision, content_sha256, text, metadata, policy_id, policy_hash, profile_id,
				profile_version, received_at) VALUES ($1, $2, 1, $3, $4, $5, 'standard', $6, 'moderation', 1, $7)`,
			[]any{l.revision1, l.report, l.contentHash1, seal(l.text1, "revisions.text/"+l.revision1),
				seal(`{"lang":"en"}`, "revisions.metadata/"+l.revision1), l.policy.Hash(), at}},
		{`INSERT INTO jobs (id, revision_id, report_id, tenant_id, source_id, revision, extraction_version, state, attempt,
				processor_id, created_at, updated_at, extracting_at, extracted_at, committed_at, mode)
			VALUES ($1, $2, $3, 'demo', 'reports', 1, 'moderation@1', 'committed', 2, 'p1', $4, $4, $4, $4, $4, 'sync')`,
			[]any{l.job1, l.revision1, l.report, at}},
		{`INSERT INTO attempts (job_id, n, token, processor_id, model, request_id, status_code, status, failure_class,
				latency_ms, input_sha256, started_at, finished_at) VALUES ($1, 1, 1, 'p1', 'm1', 'req-1', 503, 'failed', 'transient', 10, $2, $3, $3)`,
			[]any{l.job1, l.inputHash, at}},
		{`INSERT INTO attempts (job_id, n, token, processor_id, model, request_id, status_code, status, latency_ms,
				input_sha256, started_at, finished_at) VALUES ($1, 2, 2, 'p1', 'm1', 'req-2', 200, 'succeeded', 12, $2, $3, $3)`,
			[]any{l.job1, l.inputHash, at}},
		{`INSERT INTO artifacts (id, job_id, attempt_n, raw, output, schema_version, processor_id, model, created_at)
			VALUES ($1, $2, 2, $3, $4, 'moderation@1', 'p1', 'm1', $5)`,
			[]any{l.artifact1, l.job1, seal(chatRaw, "artifacts.raw/"+l.artifact1), seal(l.output1, "artifacts.output/"+l.artifact1), at}},
		{`INSERT INTO review_records (id, job_id, report_id, tenant_id, source_id, revision, kind, state, authoritative,
				classification, created_at) VALUES ($1, $2, $3, 'demo', 'reports', 1, 'extracted', 'pending', TRUE, $4, $5)`,
			[]any{l.record1, l.job1, l.report, seal(l.class1, "review_records.classification/"+l.record1), at}},
		{`INSERT INTO deliveries (source_id, delivery_key, body_sha256, job_id, report_id, revision, received_at)
			VALUES ('reports', 'legacy-d1', $1, $2, $3, 1, $4)`, []any{stet.SHA256Hex([]byte("body 1")), l.job1, l.report, at}},
		// revision 2, plaintext, under a policy hash never recorded
		{`INSERT INTO revisions (id, report_id, revision, content_sha256, text, policy_id, policy_hash, profile_id,
				profile_version, received_at) VALUES ($1, $2, 2, $3, $4, 'standard', $5, 'moderation', 1, $6)`,
			[]any{revision2, l.report, stet.SHA256Hex([]byte(forgedText2)), forgedText2, l.orphanPolicyHash, at + 1}},
		{`INSERT INTO jobs (id, revision_id, report_id, tenant_id, source_id, revision, extraction_version, state, attempt,
				created_at, updated_at, mode) VALUES ($1, $2, $3, 'demo', 'reports', 2, 'moderation@1', 'accepted', 0, $4, $4, 'sync')`,
			[]any{l.job2, revision2, l.report, at + 1}},
		// a batched report
		{`INSERT INTO reports (id, tenant_id, source_id, external_id, identity_hash, created_at, updated_at)
			VALUES ($1, 'demo', 'reports', 'legacy-3', $2, $3, $3)`, []any{l.batched, identity("legacy-3"), at}},
		{`INSERT INTO revisions (id, report_id, revision, content_sha256, text, policy_id, policy_hash, profile_id,
				profile_version, received_at) VALUES ($1, $2, 1, $3, $4, 'standard', $5, 'moderation', 1, $6)`,
			[]any{revision3, l.batched, stet.SHA256Hex([]byte(forgedText3)), forgedText3, l.policy.Hash(), at}},
		{`INSERT INTO jobs (id, revision_id, report_id, tenant_id, source_id, revision, extraction_version, state, attempt,
				processor_id, created_at, updated_at, mode) VALUES ($1, $2, $3, 'demo', 'reports', 1, 'moderation@1', 'batched', 1, 'p1', $4, $4, 'batch')`,
			[]any{l.job3, revision3, l.batched, at}},
		{`INSERT INTO batches (id, processor_id, state, item_count, created_at, updated_at) VALUES ('bat_legacy', 'p1', 'intent', 1, $1, $1)`,
			[]any{at}},
		{`INSERT INTO batch_items (batch_id, job_id, token) VALUES ('bat_legacy', $1, 1)`, []any{l.job3}},
		// a deleted report, its tombstone and its deletion
		{`INSERT INTO reports (id, tenant_id, source_id, external_id, identity_hash, created_at, updated_at, deleted_at, deletion_id)
			VALUES ($1, 'demo', 'reports', NULL, $2, $3, $3, $3, $4)`, []any{l.deleted, "deleted:" + deletion, at, deletion}},
		{`INSERT INTO revisions (id, report_id, revision, content_sha256, text, policy_id, policy_hash, profile_id,
				profile_version, received_at, text_purged_at) VALUES ($1, $2, 1, '', NULL, 'standard', $3, 'moderation', 1, $4, $4)`,
			[]any{deletedRevision, l.deleted, l.policy.Hash(), at}},
		{`INSERT INTO tombstones (identity_hash, tenant_id, source_id, deletion_id, created_at, expires_at)
			VALUES ($1, 'demo', 'reports', $2, $3, $4)`,
			[]any{ledger.TombstoneHash("demo", "reports", identity("legacy-2")), deletion, at, t0.Add(48 * time.Hour).UnixMicro()}},
		{`INSERT INTO deletions (id, tenant_id, source_id, report_id, state, requested_by, requested_at, updated_at)
			VALUES ($1, 'demo', 'reports', $2, 'done', 'test', $3, $3)`, []any{deletion, l.deleted, at}},
	}
	for _, s := range stmts {
		if _, err := db.Writer().ExecContext(ctx, s.q, s.args...); err != nil {
			t.Fatalf("%s: %v", s.q, err)
		}
	}
	return l
}

// A ledger at 0018 with rows — sealed and plaintext values, a committed
// job with its attempts, artifact and record, an accepted job, a batched
// one, a deleted report — migrated to 0019 answers every read with the
// same IDs, hashes and contents, opens its sealed values, replays its
// delivery receipts, keeps its tombstone, and takes new work.
func TestMigration0019KeepsRows(t *testing.T) {
	t.Parallel()
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, err := ledger.Open(ctx, testdb.URL(t, d))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			if _, err := db.MigrateTo(ctx, 18); err != nil {
				t.Fatal(err)
			}
			l := writeLegacy(t, db)
			applied, err := db.Migrate(ctx)
			if err != nil || len(applied) == 0 || applied[0] != "0019_integer_keys" {
				t.Fatalf("Migrate = %v, %v; want 0019_integer_keys applied first", applied, err)
			}
			db.UseKeyring(keyring(t, mk("k1", 1)))
			if err := db.CheckKeys(ctx, t0); err != nil {
				t.Fatal(err)
			}

			j, err := db.GetJob(ctx, "demo", l.job1)
			if err != nil {
				t.Fatal(err)
			}
			if j.Job.ID != l.job1 || j.Job.ReportID != l.report || j.Job.State != stet.JobCommitted || j.Job.ReviewRecordID != l.record1 ||
				j.Job.PolicyHash != l.policy.Hash() || j.Job.PolicyID != "standard" {
				t.Errorf("GetJob = %+v, want the legacy job, report, record and policy", j.Job)
			}
			if len(j.Attempts) != 2 || j.Attempts[0].InputSHA256 != l.inputHash || j.Attempts[1].Status != stet.AttemptSucceeded ||
				j.Attempts[0].FailureClass != stet.FailureTransient {
				t.Errorf("attempts = %+v, want two, the input hash kept", j.Attempts)
			}
			if j.Artifact == nil || j.Artifact.ID != l.artifact1 {
				t.Errorf("artifact = %+v, want %s", j.Artifact, l.artifact1)
			}

			for _, lookup := range []ledger.ReportLookup{
				{Tenant: "demo", ReportID: l.report, Now: t0},
				{Tenant: "demo", SourceID: "reports", ExternalID: "legacy-1", Now: t0},
			} {
				r, err := db.GetReport(ctx, lookup)
				if err != nil {
					t.Fatal(err)
				}
				if r.Report.ID != l.report || len(r.Revisions) != 2 || r.Revisions[0].JobID != l.job1 ||
					r.Revisions[0].ReviewRecordID != l.record1 || !r.Revisions[0].Authoritative || r.Revisions[1].JobID != l.job2 ||
					r.Report.IdentityHash != ledger.IdentityHash(stet.IdentityExternalID, "legacy-1", stet.Text{}) {
					t.Errorf("GetReport(%+v) = %+v %+v, want the legacy report with both revisions", lookup, r.Report, r.Revisions)
				}
			}
			if _, err := db.GetReport(ctx, ledger.ReportLookup{Tenant: "demo", ReportID: l.deleted, Now: t0}); !errors.Is(err, ledger.ErrGone) {
				t.Errorf("GetReport of the deleted report = %v, want ErrGone", err)
			}

			// Sealed under the old IDs: the record's classification, the
			// artifact's output and the revision's text still open.
			recs, _, err := db.ListReview(ctx, ledger.ReviewFilter{Tenant: "demo"})
			if err != nil || len(recs) != 1 || recs[0].ID != l.record1 || string(recs[0].Classification) != l.class1 ||
				recs[0].JobID != l.job1 || recs[0].ReportID != l.report {
				t.Fatalf("ListReview = %+v, %v; want the legacy record, opened", recs, err)
			}
			w, err := db.LoadWork(ctx, db.Writer(), l.job1)
			if err != nil || w.Text.Reveal() != l.text1 {
				t.Errorf("LoadWork(legacy committed job) = %v; want its text opened", err)
			}
			var legacy, stored string
			var sealed bool
			if err := db.Writer().QueryRow(`SELECT legacy_id, raw, (sealed & 1) <> 0 FROM artifacts WHERE job_id = (SELECT id FROM jobs WHERE public_id = $1)`,
				ledger.StoredID(l.job1)).Scan(&legacy, &stored, &sealed); err != nil {
				t.Fatal(err)
			}
			if raw, err := db.OpenSealed(ctx, l.report, "artifacts.raw", ledger.ArtifactID(legacy, l.job1), stored, sealed); err != nil || raw != chatRaw {
				t.Errorf("OpenSealed(legacy raw) = %.40q, %v; want the response", raw, err)
			}
			w2, err := db.LoadWork(ctx, db.Writer(), l.job2)
			if err != nil || w2.Text.Reveal() != forgedText2 || w2.Job.PolicyHash != l.orphanPolicyHash {
				t.Fatalf("LoadWork(legacy accepted job) = %+v, %v", w2, err)
			}
			if w3, err := db.LoadWork(ctx, db.Writer(), l.job3); err != nil || w3.Text.Reveal() != forgedText3 {
				t.Errorf("LoadWork(legacy batched job) = %v; want its forged text verbatim", err)
			}
			if n := count(t, db, `SELECT COUNT(*) FROM revisions WHERE sealed <> 0`); n != 1 {
				t.Errorf("revisions flagged sealed by 0022 = %d, want 1 (the one sealed under its report's key)", n)
			}
			if _, err := ledger.PolicyVersion(ctx, db.Writer(), l.orphanPolicyHash); !errors.Is(err, stet.ErrNotFound) {
				t.Errorf("PolicyVersion of a hash never recorded = %v, want not found", err)
			}
			if pol, err := ledger.PolicyVersion(ctx, db.Writer(), l.policy.Hash()); err != nil || pol.ReplayHorizon != l.policy.ReplayHorizon {
				t.Errorf("PolicyVersion = %+v, %v; want the recorded policy", pol, err)
			}
			items, err := ledger.BatchItems(ctx, db.Writer(), "bat_legacy")
			if err != nil || len(items) != 1 || items[0].JobID != l.job3 || items[0].PolicyHash != l.policy.Hash() {
				t.Errorf("BatchItems = %+v, %v; want the batched job", items, err)
			}

			// Receipts and tombstones answer as before.
			replay := acceptLegacy(t, db, "legacy-1", 1, l.text1, "legacy-d1", "body 1")
			if replay.Outcome != ledger.OutcomeDuplicate || replay.JobID != l.job1 || replay.ReportID != l.report {
				t.Errorf("replay of the legacy receipt = %+v, want the legacy job", replay)
			}
			again := acceptLegacy(t, db, "legacy-1", 1, l.text1, "legacy-d9", "body 9")
			if again.Outcome != ledger.OutcomeDuplicate || again.JobID != l.job1 {
				t.Errorf("the same revision under a new delivery = %+v, want the legacy job", again)
			}
			if gone := acceptLegacy(t, db, "legacy-2", 1, "anything", "legacy-d2", "body 2"); gone.Outcome != ledger.OutcomeGone {
				t.Errorf("a delivery of the deleted identity = %+v, want gone", gone)
			}

			// New work: revision 3 of the legacy report, committed, takes
			// the authoritative pointer from the legacy record.
			r3 := acceptLegacy(t, db, "legacy-1", 3, "Revision three.", "legacy-d3", "body 3")
			if r3.Outcome != ledger.OutcomeAccepted || r3.ReportID != l.report {
				t.Fatalf("revision 3 = %+v, want accepted on the legacy report", r3)
			}
			rec3 := extractAndCommit(t, db, r3.JobID)
			r, err := db.GetReport(ctx, ledger.ReportLookup{Tenant: "demo", ReportID: l.report, Now: t0})
			if err != nil || len(r.Revisions) != 3 || r.Revisions[0].Authoritative || !r.Revisions[2].Authoritative ||
				r.Revisions[2].ReviewRecordID != rec3 {
				t.Errorf("after revision 3: %+v, %v; want 3 revisions, the third authoritative", r, err)
			}
		})
	}
}

// acceptLegacy delivers a revision of a legacy report under the legacy
// policy's hash.
func acceptLegacy(t *testing.T, db *ledger.DB, ext string, rev int64, text, delivery, body string) ledger.AcceptResult {
	t.Helper()
	ctx := context.Background()
	var res ledger.AcceptResult
	err := db.InTx(ctx, func(tx *sql.Tx) error {
		var err error
		res, _, err = db.AcceptOne(ctx, tx, ledger.AcceptParams{
			TenantID: "demo", SourceID: "reports", Identity: stet.IdentityExternalID, Revisions: stet.RevisionsExplicit,
			ExternalID: ext, Revision: rev, Text: stet.NewText(text), DeliveryKey: delivery, BodySHA256: stet.SHA256Hex([]byte(body)),
			PolicyID: "standard", PolicyHash: (&stet.Policy{ID: "standard", Processors: []string{"p1"}, ReplayHorizon: 48 * time.Hour}).Hash(),
			ProfileID: "moderation", ProfileVersion: 1, Now: t0,
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return res
}
