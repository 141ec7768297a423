package ledger

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/stetlabs/stet"
)

// Copy names of the local deletion tasks, in the order the worker runs
// them: the data key first (crypto-shredding makes every other copy
// unreadable at once), then the rows.
const (
	CopyEncryptionKey = "encryption_key"
	CopyRevisionText  = "revision_text"
	CopyArtifacts     = "artifacts"
	CopyReviewRecords = "review_records"
	CopyAttempts      = "attempts"
	CopyDeliveries    = "deliveries"
)

// LocalCopies are the copies stet holds itself, in task order.
var LocalCopies = []string{CopyEncryptionKey, CopyRevisionText, CopyArtifacts, CopyReviewRecords, CopyAttempts, CopyDeliveries}

// Prefixes of the copies a provider holds. The outbound prefix is the seam
// for destinations (a record.deleted event per destination).
const (
	PrefixProviderFile      = "provider_file:"      // provider_file:<processor>/<file_id>
	PrefixProviderBatch     = "provider_batch:"     // provider_batch:<processor>/<batch_id>
	PrefixProviderRetention = "provider_retention:" // provider_retention:<processor>
	PrefixOutbound          = "outbound:"           // outbound:<destination>
)

// DefaultReplayHorizon keeps a tombstone when the recorded policy sets no
// replay horizon: a replayed delivery must not re-create deleted data.
const DefaultReplayHorizon = 90 * 24 * time.Hour

// DeletionDue is how long a local task may take before invariant 6 fires.
const DeletionDue = time.Hour

// TombstoneHash is the key of a tombstone: the SHA-256 of the tenant, the
// source and the report's identity hash. It never holds the external ID in
// clear, and two sources' identical external IDs do not collide.
func TombstoneHash(tenant, source, identityHash string) string {
	return stet.SHA256Hex([]byte("tombstone\x00" + tenant + "\x00" + source + "\x00" + identityHash))
}

// DeletionRequest asks to delete one report of a tenant, by ID or by
// source and external ID.
type DeletionRequest struct {
	Tenant     string
	ReportID   string
	SourceID   string
	ExternalID string
	Actor      string
	Now        time.Time
}

// DeletionRequested is what a request came to.
type DeletionRequested struct {
	DeletionID string
	ReportID   string
	Created    bool // false: the report was already deleted; DeletionID is that deletion's
}

var errGone = &stet.Error{Code: stet.EGone, Message: "the report was deleted"}

// ErrGone is returned by reads of a deleted report and its records.
var ErrGone error = errGone

// qJobsOfReport selects the keys of a report's jobs ($1 the report's key)
// through its revisions: the (report_id, revision) and (revision_id,
// extraction_version) keys' indexes. Jobs carry no index of their own by
// report (migration 0015 dropped it); only a deletion asks.
const qJobsOfReport = `SELECT j.id FROM revisions v JOIN jobs j ON j.revision_id = v.id WHERE v.report_id = $1`

// A deletion's statements by report ($1 the report's key) and by external
// ID. TestLookupsSearchIndexes checks that each searches indexes on both
// dialects, not a whole table.
const (
	// qReportToDelete finds an external-ID report by its identity hash ($3).
	qReportToDelete = `SELECT id, public_id, source_id, identity_hash, deletion_id, tombstone_hash, sealed FROM reports
		WHERE tenant_id = $1 AND source_id = $2 AND identity_hash IN ($3, $4)`
	// qCancelReportJobs cancels a report's unfinished jobs ($2 the time).
	qCancelReportJobs = `UPDATE jobs SET state = 'cancelled', lease_until = NULL, updated_at = $2
		WHERE id IN (` + qJobsOfReport + `) AND state NOT IN ('committed', 'manual', 'cancelled')`
	// qProviderCopies lists the provider batches that hold a report's text.
	qProviderCopies = `SELECT DISTINCT b.processor_id, COALESCE(b.provider_batch_id, ''), COALESCE(b.input_file_id, ''),
			COALESCE(b.output_file_id, ''), COALESCE(b.error_file_id, '')
		FROM batch_items i JOIN batches b ON b.id = i.batch_id
		WHERE i.job_id IN (` + qJobsOfReport + `)`
	// qSyncProcessors lists the processors a report's text went to outside
	// any batch, with the last call.
	qSyncProcessors = `SELECT t.processor_id, MAX(t.started_at) FROM attempts t
		WHERE t.job_id IN (` + qJobsOfReport + `) AND t.batch_id IS NULL GROUP BY t.processor_id`
	// qRecordsOfReport lists a report's review records (by job: records
	// have no index by report but the authoritative one's).
	qRecordsOfReport = `SELECT public_id FROM review_records WHERE job_id IN (` + qJobsOfReport + `) ORDER BY id`
	// qJobIDsOfReport lists the public IDs of a report's jobs, which the
	// outbox names its rows by.
	qJobIDsOfReport = `SELECT j.public_id FROM revisions v JOIN jobs j ON j.revision_id = v.id WHERE v.report_id = $1`
	// qDeletedEvents sums up the record.deleted events of one of a
	// report's jobs ($1, its public ID) to one destination ($2), by state;
	// an event carries its record's job (outbox_job).
	qDeletedEvents = `SELECT COUNT(*),
			COALESCE(SUM(CASE WHEN state = 'delivered' THEN 1 ELSE 0 END), 0),
			COALESCE(SUM(CASE WHEN state IN ('failed', 'disabled') THEN 1 ELSE 0 END), 0)
		FROM outbox WHERE job_id = $1 AND destination_id = $2 AND event = $3`
)

// RequestDeletion records a deletion in tx: it marks the report deleted
// (its external ID and identity hash are cleared), writes the tombstone
// (until the longest replay horizon of the report's recorded policies),
// cancels the report's unfinished jobs, and writes the deletion with one
// pending task per copy known now. The caller enqueues the deletion's
// worker in the same tx. A report already deleted returns its deletion
// (Created false); an unknown or another tenant's report is ENotFound.
func (db *DB) RequestDeletion(ctx context.Context, tx Querier, p DeletionRequest) (DeletionRequested, error) {
	now := micros(p.Now)
	var reportID, sourceID, identity string
	var reportKey int64
	var deletionID sql.NullString
	var tombstone []byte
	var sealed int
	var err error
	if p.ReportID != "" {
		err = tx.QueryRowContext(ctx, `SELECT id, public_id, source_id, identity_hash, deletion_id, tombstone_hash, sealed FROM reports WHERE public_id = $1 AND tenant_id = $2`,
			pub(p.ReportID), p.Tenant).Scan(&reportKey, reportPub(&reportID), &sourceID, shaScan{&identity}, &deletionID, &tombstone, &sealed)
	} else {
		// By the identity hash of the external ID (the unique key's index).
		hash := IdentityHash(stet.IdentityExternalID, p.ExternalID, stet.Text{})
		stored, plain := db.forms(hashIdentity, hash)
		err = tx.QueryRowContext(ctx, qReportToDelete, p.Tenant, p.SourceID, sha(stored), sha(plain)).
			Scan(&reportKey, reportPub(&reportID), &sourceID, shaScan{&identity}, &deletionID, &tombstone, &sealed)
		if errors.Is(err, sql.ErrNoRows) {
			// Deleted before? The tombstone knows, by hash.
			id, terr := db.tombstoneDeletion(ctx, tx, p.Tenant, p.SourceID, hash, p.Now)
			if terr != nil {
				return DeletionRequested{}, terr
			}
			if id != "" {
				var rep string
				if err := tx.QueryRowContext(ctx, `SELECT report_id FROM deletions WHERE id = $1`, id).Scan(&rep); err != nil {
					return DeletionRequested{}, fmt.Errorf("read deletion: %w", err)
				}
				return DeletionRequested{DeletionID: id, ReportID: rep}, nil
			}
		}
	}
	if errors.Is(err, sql.ErrNoRows) {
		return DeletionRequested{}, notFound("report")
	}
	if err != nil {
		return DeletionRequested{}, fmt.Errorf("read report: %w", err)
	}
	if deletionID.Valid {
		return DeletionRequested{DeletionID: deletionID.String, ReportID: reportID}, nil
	}

	// The report row first: intake of the same report locks it too, so a
	// delivery racing this request either lands before (and its job is
	// cancelled here) or finds the report deleted.
	id := stet.NewID("del", p.Now)
	res, err := tx.ExecContext(ctx, `UPDATE reports SET deleted_at = $1, deletion_id = $2, external_id = NULL,
			identity_hash = $3, tombstone_hash = NULL, updated_at = $1
		WHERE id = $4 AND deleted_at IS NULL`, now, id, []byte("deleted:"+id), reportKey)
	if err != nil {
		return DeletionRequested{}, fmt.Errorf("mark report deleted: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return DeletionRequested{}, ErrRetryItem // a concurrent deletion won; read it again
	}
	horizon, err := reportReplayHorizon(ctx, tx, reportKey)
	if err != nil {
		return DeletionRequested{}, err
	}
	// The tombstone: the blind one intake kept on the report, or, for a
	// report whose identity hash is still plain, the plain one (stet rekey
	// converts it).
	tomb, tombSealed := TombstoneHash(p.Tenant, sourceID, identity), 0
	if len(tombstone) > 0 && sealed&sealedBlind != 0 {
		tomb, tombSealed = hex.EncodeToString(tombstone), sealedBlind
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO tombstones (identity_hash, tenant_id, source_id, deletion_id, created_at, expires_at, sealed)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (identity_hash) DO UPDATE SET deletion_id = excluded.deletion_id, created_at = excluded.created_at,
			expires_at = excluded.expires_at`,
		tomb, p.Tenant, sourceID, id, now, micros(p.Now.Add(horizon)), tombSealed); err != nil {
		return DeletionRequested{}, fmt.Errorf("write tombstone: %w", err)
	}
	if _, err := tx.ExecContext(ctx, qCancelReportJobs, reportKey, now); err != nil {
		return DeletionRequested{}, fmt.Errorf("cancel jobs: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO deletions (id, tenant_id, source_id, report_id, state, requested_by, requested_at, updated_at)
		VALUES ($1, $2, $3, $4, 'pending', $5, $6, $6)`, id, p.Tenant, sourceID, reportID, p.Actor, now); err != nil {
		return DeletionRequested{}, fmt.Errorf("write deletion: %w", err)
	}
	if err := addDeletionTasks(ctx, tx, id, reportKey, p.Now); err != nil {
		return DeletionRequested{}, err
	}
	if err := addOutboundTasks(ctx, tx, id, reportKey, p.Now); err != nil {
		return DeletionRequested{}, err
	}
	if err := Audit(ctx, tx, AuditEntry{Tenant: p.Tenant, Actor: p.Actor, Action: "report.delete", ObjectType: "report",
		ObjectID: reportID, Detail: "deletion " + id, Now: p.Now}); err != nil {
		return DeletionRequested{}, err
	}
	return DeletionRequested{DeletionID: id, ReportID: reportID, Created: true}, nil
}

// reportReplayHorizon is the longest replay horizon among the policies the
// report's revisions recorded (DefaultReplayHorizon when none sets one).
func reportReplayHorizon(ctx context.Context, q Querier, reportKey int64) (time.Duration, error) {
	rows, err := q.QueryContext(ctx, `SELECT DISTINCT pv.hash FROM revisions v JOIN policy_versions pv ON pv.id = v.policy_version
		WHERE v.report_id = $1`, reportKey)
	if err != nil {
		return 0, fmt.Errorf("read recorded policies: %w", err)
	}
	var hashes []string
	for rows.Next() {
		var h string
		if err := rows.Scan(&h); err != nil {
			rows.Close()
			return 0, err
		}
		hashes = append(hashes, h)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	var horizon time.Duration
	for _, h := range hashes {
		pol, err := PolicyVersion(ctx, q, h)
		if errors.Is(err, stet.ErrNotFound) {
			continue
		}
		if err != nil {
			return 0, err
		}
		horizon = max(horizon, pol.ReplayHorizon)
	}
	if horizon == 0 {
		horizon = DefaultReplayHorizon
	}
	return horizon, nil
}

// AddDeletionTasks writes a pending task for every copy of the report known
// now that has none yet: the local copies, each provider file and batch the
// batches ledger recorded for the report's jobs, and one retention task
// per processor that received its text synchronously. The worker calls it
// again before it finishes, so copies made after the request (a batch's
// output file) get their task.
func AddDeletionTasks(ctx context.Context, q Querier, deletionID, reportID string, now time.Time) error {
	key, err := reportKeyByID(ctx, q, reportID)
	if err != nil {
		return err
	}
	return addDeletionTasks(ctx, q, deletionID, key, now)
}

func addDeletionTasks(ctx context.Context, q Querier, deletionID string, reportKey int64, now time.Time) error {
	copies := slicesClone(LocalCopies)
	rows, err := q.QueryContext(ctx, qProviderCopies, reportKey)
	if err != nil {
		return fmt.Errorf("read provider copies: %w", err)
	}
	for rows.Next() {
		var proc, batch, in, out, errFile string
		if err := rows.Scan(&proc, &batch, &in, &out, &errFile); err != nil {
			rows.Close()
			return fmt.Errorf("read provider copies: %w", err)
		}
		for _, f := range []string{in, out, errFile} {
			if f != "" {
				copies = append(copies, PrefixProviderFile+proc+"/"+f)
			}
		}
		if batch != "" {
			copies = append(copies, PrefixProviderBatch+proc+"/"+batch)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	procs, err := syncProcessors(ctx, q, reportKey)
	if err != nil {
		return err
	}
	for p := range procs {
		copies = append(copies, PrefixProviderRetention+p)
	}
	ts := micros(now)
	due := micros(now.Add(DeletionDue))
	for _, c := range copies {
		if _, err := q.ExecContext(ctx, `INSERT INTO deletion_tasks (deletion_id, copy, state, due_at, updated_at)
			VALUES ($1, $2, 'pending', $3, $4) ON CONFLICT (deletion_id, copy) DO NOTHING`, deletionID, c, due, ts); err != nil {
			return fmt.Errorf("write deletion task: %w", err)
		}
	}
	return nil
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }

// syncProcessors returns, for each processor that received the report's
// text synchronously (an attempt outside any batch), the time of its last
// call.
func syncProcessors(ctx context.Context, q Querier, reportKey int64) (map[string]time.Time, error) {
	rows, err := q.QueryContext(ctx, qSyncProcessors, reportKey)
	if err != nil {
		return nil, fmt.Errorf("read processors of report: %w", err)
	}
	defer rows.Close()
	out := map[string]time.Time{}
	for rows.Next() {
		var p string
		var last sql.NullInt64
		if err := rows.Scan(&p, &last); err != nil {
			return nil, err
		}
		out[p] = fromMicros(last)
	}
	return out, rows.Err()
}

// LastSyncCall returns when processorID last received the report's text
// synchronously (zero if never).
func LastSyncCall(ctx context.Context, q Querier, reportID, processorID string) (time.Time, error) {
	key, err := reportKeyByID(ctx, q, reportID)
	if err != nil {
		return time.Time{}, err
	}
	m, err := syncProcessors(ctx, q, key)
	return m[processorID], err
}

// tombstoneDeletion returns the deletion of an identity (its plain hash)
// of a source whose tombstone has not yet expired, or "".
func (db *DB) tombstoneDeletion(ctx context.Context, q Querier, tenant, source, identity string, now time.Time) (string, error) {
	stored, plain := db.forms(hashTombstone, TombstoneHash(tenant, source, identity))
	var id string
	err := q.QueryRowContext(ctx, `SELECT deletion_id FROM tombstones WHERE identity_hash IN ($1, $2) AND expires_at > $3`,
		stored, plain, micros(now)).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read tombstone: %w", err)
	}
	return id, nil
}

// tombstoned reports whether an identity (its plain hash) of a source was
// deleted and its tombstone has not yet expired.
func (db *DB) tombstoned(ctx context.Context, q Querier, tenant, source, identity string, now time.Time) (bool, error) {
	id, err := db.tombstoneDeletion(ctx, q, tenant, source, identity, now)
	return id != "", err
}

// GetDeletion reads a deletion of a tenant (of any tenant with AnyTenant;
// an empty tenant is refused) with its tasks.
func (db *DB) GetDeletion(ctx context.Context, tenant, id string) (*stet.Deletion, error) {
	if tenant == "" {
		return nil, fmt.Errorf("read deletion: empty tenant")
	}
	return getDeletion(ctx, db.w, tenant, id)
}

func getDeletion(ctx context.Context, q Querier, tenant, id string) (*stet.Deletion, error) {
	var d stet.Deletion
	var state string
	var requested int64
	var done sql.NullInt64
	err := q.QueryRowContext(ctx, `SELECT id, tenant_id, source_id, report_id, state, requested_by, requested_at, done_at
		FROM deletions WHERE id = $1 AND ($2 = '*any*' OR tenant_id = $2)`, id, tenant).
		Scan(&d.ID, &d.TenantID, &d.SourceID, &d.ReportID, &state, &d.RequestedBy, &requested, &done)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("deletion")
	}
	if err != nil {
		return nil, fmt.Errorf("read deletion: %w", err)
	}
	d.State, d.RequestedAt, d.DoneAt = stet.DeletionState(state), time.UnixMicro(requested).UTC(), fromMicros(done)
	rows, err := q.QueryContext(ctx, `SELECT copy, state, due_at, done_at, expires_at, COALESCE(reason, ''),
			COALESCE(confirmed_by, ''), COALESCE(evidence, '')
		FROM deletion_tasks WHERE deletion_id = $1`, id)
	if err != nil {
		return nil, fmt.Errorf("read deletion tasks: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var t stet.DeletionTask
		var st string
		var due int64
		var doneAt, expires sql.NullInt64
		if err := rows.Scan(&t.Copy, &st, &due, &doneAt, &expires, &t.Reason, &t.ConfirmedBy, &t.Evidence); err != nil {
			return nil, fmt.Errorf("read deletion task: %w", err)
		}
		t.State, t.DueAt, t.DoneAt, t.ExpiresAt = stet.DeletionState(st), time.UnixMicro(due).UTC(), fromMicros(doneAt), fromMicros(expires)
		d.Tasks = append(d.Tasks, t)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	sort.SliceStable(d.Tasks, func(i, j int) bool {
		return taskOrder(d.Tasks[i].Copy) < taskOrder(d.Tasks[j].Copy) ||
			(taskOrder(d.Tasks[i].Copy) == taskOrder(d.Tasks[j].Copy) && d.Tasks[i].Copy < d.Tasks[j].Copy)
	})
	return &d, nil
}

// taskOrder sorts tasks as the worker runs them: local copies in
// LocalCopies order, then provider files, batches, retention, outbound.
func taskOrder(c string) int {
	for i, l := range LocalCopies {
		if c == l {
			return i
		}
	}
	for i, p := range []string{PrefixProviderFile, PrefixProviderBatch, PrefixProviderRetention, PrefixOutbound} {
		if strings.HasPrefix(c, p) {
			return len(LocalCopies) + i
		}
	}
	return 100
}

// The newest deletions, of one tenant or of all, read backwards off
// deletions_tenant and deletions_requested (migration 0018). The tenant is
// named in the statement, not as "$1 = '*any*' OR tenant_id = $1", which
// would leave SQLite no index to read.
const (
	qTenantDeletions = `SELECT id FROM deletions WHERE tenant_id = $1 ORDER BY requested_at DESC, id DESC LIMIT $2`
	qAllDeletions    = `SELECT id FROM deletions ORDER BY requested_at DESC, id DESC LIMIT $1`
	// qOpenDeletions reads deletions_pending: only pending deletions.
	qOpenDeletions = `SELECT id FROM deletions WHERE state = 'pending' AND updated_at < $1 ORDER BY requested_at LIMIT $2`
)

// ListDeletions lists a tenant's deletions (every tenant's with AnyTenant;
// an empty tenant is refused), newest first, without their tasks.
func (db *DB) ListDeletions(ctx context.Context, tenant string, limit int) ([]*stet.Deletion, error) {
	if tenant == "" {
		return nil, fmt.Errorf("list deletions: empty tenant")
	}
	if limit <= 0 {
		limit = 100
	}
	q, args := qTenantDeletions, []any{tenant, limit}
	if tenant == AnyTenant {
		q, args = qAllDeletions, []any{limit}
	}
	rows, err := db.w.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list deletions: %w", err)
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := make([]*stet.Deletion, 0, len(ids))
	for _, id := range ids {
		d, err := getDeletion(ctx, db.w, tenant, id)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// SetTask records a task's outcome: done (with an optional reason, such as
// "encryption off") or unresolved (with its reason and, for a provider-held
// copy, when its retention ends). A done task is never changed again.
func SetTask(ctx context.Context, q Querier, deletionID, copy string, state stet.DeletionState, reason string, expires, now time.Time) error {
	var done sql.NullInt64
	if state == stet.DeletionDone {
		done = nullMicros(now)
	}
	_, err := q.ExecContext(ctx, `UPDATE deletion_tasks SET state = $1, reason = $2, expires_at = $3, done_at = $4,
			tries = tries + 1, updated_at = $5
		WHERE deletion_id = $6 AND copy = $7 AND state <> 'done'`,
		string(state), nullString(reason), nullMicros(expires), done, micros(now), deletionID, copy)
	if err != nil {
		return fmt.Errorf("set deletion task: %w", err)
	}
	return nil
}

// FinishDeletion sets a deletion's state from its tasks: done when every
// task is done, unresolved when any is unresolved, pending otherwise. It
// returns the state.
func FinishDeletion(ctx context.Context, q Querier, deletionID string, now time.Time) (stet.DeletionState, error) {
	var pending, unresolved int
	if err := q.QueryRowContext(ctx, `SELECT
			COALESCE(SUM(CASE WHEN state = 'pending' THEN 1 ELSE 0 END), 0),
			COALESCE(SUM(CASE WHEN state = 'unresolved' THEN 1 ELSE 0 END), 0)
		FROM deletion_tasks WHERE deletion_id = $1`, deletionID).Scan(&pending, &unresolved); err != nil {
		return "", fmt.Errorf("count deletion tasks: %w", err)
	}
	state := stet.DeletionDone
	switch {
	case pending > 0:
		state = stet.DeletionPending
	case unresolved > 0:
		state = stet.DeletionUnresolved
	}
	var done sql.NullInt64
	if state == stet.DeletionDone {
		done = nullMicros(now)
	}
	if _, err := q.ExecContext(ctx, `UPDATE deletions SET state = $1, done_at = COALESCE(done_at, $2), updated_at = $3 WHERE id = $4`,
		string(state), done, micros(now), deletionID); err != nil {
		return "", fmt.Errorf("finish deletion: %w", err)
	}
	return state, nil
}

// ShredReportKey destroys the report's data key, so every sealed copy of
// its text, metadata, raw responses, outputs, classifications and notes —
// in the live rows, PostgreSQL dead tuples, the WAL, replicas and backups —
// becomes unreadable at once (crypto-shredding). The deletion worker calls
// it first, before the plaintext rows are deleted, and then verifies with
// ReportKeyExists.
//
// Deleting the one row of report_keys is the whole of it: the data key
// exists nowhere else (never in a log, never unwrapped at rest). On SQLite,
// secure_delete and the deletion's WAL checkpoint take the wrapped key's
// bytes out of the file and the -wal too. Without encryption there is no
// row and it deletes nothing.
func ShredReportKey(ctx context.Context, q Querier, reportID string) error {
	if _, err := q.ExecContext(ctx, `DELETE FROM report_keys WHERE report_id = `+reportKeySQL("$1"), pub(reportID)); err != nil {
		return fmt.Errorf("destroy data key: %w", err)
	}
	return nil
}

// ReportKeyExists reports whether the report still has a data key: the
// verification of ShredReportKey.
func ReportKeyExists(ctx context.Context, q Querier, reportID string) (bool, error) {
	var ok bool
	if err := q.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM report_keys WHERE report_id = `+reportKeySQL("$1")+`)`, pub(reportID)).Scan(&ok); err != nil {
		return false, fmt.Errorf("read data key: %w", err)
	}
	return ok, nil
}

// deleteCopy holds, for each local copy but the encryption key, the
// statement that deletes a report's copy ($1 the report's key, $2 the time).
var deleteCopy = map[string]string{
	// The row stays (IDs, revision number, received_at); the text, the
	// metadata and the content hashes (which could confirm a guessed text
	// or recording) go, and so does any audio (DeleteLocalCopy).
	CopyRevisionText: `UPDATE revisions SET text = NULL, metadata = NULL, content_sha256 = NULL, audio_sha256 = NULL,
		transcript_sha256 = NULL, text_purged_at = COALESCE(text_purged_at, $2) WHERE report_id = $1`,
	CopyArtifacts:     `DELETE FROM artifacts WHERE job_id IN (` + qJobsOfReport + `)`,
	CopyReviewRecords: `DELETE FROM review_records WHERE job_id IN (` + qJobsOfReport + `)`,
	// The rows stay so calls remain counted; what identifies the request at
	// the provider, and the hash of what was sent, go.
	CopyAttempts: `UPDATE attempts SET request_id = NULL, model = NULL, input_sha256 = NULL,
		metadata_purged_at = COALESCE(metadata_purged_at, $2) WHERE job_id IN (` + qJobsOfReport + `)`,
	CopyDeliveries: `DELETE FROM deliveries WHERE report_id = $1`,
}

// verifyCopy holds, for each local copy but the encryption key, the
// statement that counts what is left of a report's copy ($1 the report's key).
var verifyCopy = map[string]string{
	CopyRevisionText: `SELECT (SELECT COUNT(*) FROM revisions WHERE report_id = $1 AND (text IS NOT NULL OR metadata IS NOT NULL
			OR content_sha256 IS NOT NULL OR audio_sha256 IS NOT NULL OR transcript_sha256 IS NOT NULL))
		+ (SELECT COUNT(*) FROM revision_audio WHERE revision_id IN (SELECT id FROM revisions WHERE report_id = $1))`,
	CopyArtifacts: `SELECT COUNT(*) FROM artifacts WHERE job_id IN (` + qJobsOfReport + `)`,
	CopyReviewRecords: `SELECT (SELECT COUNT(*) FROM review_records WHERE job_id IN (` + qJobsOfReport + `))
		+ (SELECT COUNT(*) FROM decisions WHERE report_id = $1)`,
	CopyAttempts: `SELECT COUNT(*) FROM attempts WHERE job_id IN (` + qJobsOfReport + `)
		AND (request_id IS NOT NULL OR model IS NOT NULL OR input_sha256 IS NOT NULL)`,
	CopyDeliveries: `SELECT COUNT(*) FROM deliveries WHERE report_id = $1`,
}

// DeleteLocalCopy deletes one local copy of a report in tx. The worker
// then calls VerifyLocalCopy, which must find nothing.
func DeleteLocalCopy(ctx context.Context, tx Querier, copy, reportID string, now time.Time) error {
	if copy == CopyEncryptionKey {
		return ShredReportKey(ctx, tx, reportID)
	}
	q, ok := deleteCopy[copy]
	if !ok {
		return fmt.Errorf("deletion: %q is not a local copy", copy)
	}
	key, err := reportKeyByID(ctx, tx, reportID)
	if err != nil {
		return err
	}
	if copy == CopyRevisionText {
		// The audio of the report's revisions, kept until transcribed.
		if _, err := tx.ExecContext(ctx, `DELETE FROM revision_audio WHERE revision_id IN (SELECT id FROM revisions WHERE report_id = $1)`, key); err != nil {
			return fmt.Errorf("delete %s: %w", copy, err)
		}
	}
	if copy == CopyReviewRecords {
		// The records' decisions first: they refer to the records.
		if _, err := tx.ExecContext(ctx, `DELETE FROM decisions WHERE report_id = $1`, key); err != nil {
			return fmt.Errorf("delete %s: %w", copy, err)
		}
	}
	if strings.Contains(q, "$2") {
		_, err = tx.ExecContext(ctx, q, key, micros(now))
	} else {
		_, err = tx.ExecContext(ctx, q, key)
	}
	if err != nil {
		return fmt.Errorf("delete %s: %w", copy, err)
	}
	return nil
}

// VerifyLocalCopy counts what is left of one local copy of a report; the
// task is done only when it is zero.
func VerifyLocalCopy(ctx context.Context, q Querier, copy, reportID string) (int, error) {
	if copy == CopyEncryptionKey {
		ok, err := ReportKeyExists(ctx, q, reportID)
		if ok {
			return 1, err
		}
		return 0, err
	}
	sqlText, ok := verifyCopy[copy]
	if !ok {
		return 0, fmt.Errorf("deletion: %q is not a local copy", copy)
	}
	key, err := reportKeyByID(ctx, q, reportID)
	if err != nil {
		return 0, err
	}
	var n int
	if err := q.QueryRowContext(ctx, sqlText, key).Scan(&n); err != nil {
		return 0, fmt.Errorf("verify %s: %w", copy, err)
	}
	return n, nil
}

// BatchCopy is what the batches ledger knows about a provider batch a
// deletion task names.
type BatchCopy struct {
	State     string // the batch's ledger state
	Applied   bool   // its results were applied (or it ended without any)
	ExpiresAt time.Time
}

// BatchOfCopy reads the ledger's batch behind a provider file or batch ID.
func BatchOfCopy(ctx context.Context, q Querier, processorID, providerID string) (*BatchCopy, error) {
	var b BatchCopy
	var applied, expires sql.NullInt64
	err := q.QueryRowContext(ctx, `SELECT state, applied_at, results_expire_at FROM batches
		WHERE processor_id = $1 AND (provider_batch_id = $2 OR input_file_id = $2 OR output_file_id = $2 OR error_file_id = $2)
		ORDER BY created_at DESC LIMIT 1`, processorID, providerID).Scan(&b.State, &applied, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("batch")
	}
	if err != nil {
		return nil, fmt.Errorf("read batch: %w", err)
	}
	b.Applied = applied.Valid || b.State == "failed" || b.State == "expired" || b.State == "cancelled"
	b.ExpiresAt = fromMicros(expires)
	return &b, nil
}

// OpenDeletions returns pending deletions not touched since before cut:
// their worker was lost; the sweeper enqueues a new one.
func OpenDeletions(ctx context.Context, q Querier, cut time.Time, limit int) ([]string, error) {
	rows, err := q.QueryContext(ctx, qOpenDeletions, micros(cut), limit)
	if err != nil {
		return nil, fmt.Errorf("read open deletions: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// Checkpoint truncates SQLite's write-ahead log, so the bytes a deletion
// removed are gone from the -wal file too (secure_delete zeroes them in the
// database file). It fails when a reader keeps the log from being reset;
// the caller retries. On PostgreSQL it does nothing: see
// docs/governance.md for what covers its WAL.
func (db *DB) Checkpoint(ctx context.Context) error {
	if db.dialect.name != SQLite {
		return nil
	}
	var busy, log, done int
	if err := db.w.QueryRowContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &log, &done); err != nil {
		return fmt.Errorf("wal checkpoint: %w", err)
	}
	if busy != 0 {
		return fmt.Errorf("wal checkpoint: a reader holds the log; retry")
	}
	return nil
}

// ReportTenant returns the tenant of a report, for operator commands that
// name a report by ID.
func (db *DB) ReportTenant(ctx context.Context, reportID string) (string, error) {
	var t string
	err := db.w.QueryRowContext(ctx, `SELECT tenant_id FROM reports WHERE public_id = $1`, pub(reportID)).Scan(&t)
	if errors.Is(err, sql.ErrNoRows) {
		return "", notFound("report")
	}
	if err != nil {
		return "", fmt.Errorf("read report: %w", err)
	}
	return t, nil
}

// addOutboundTasks sends record.deleted to every destination that received
// one of the report's records (EnqueueRecordDeleted) and writes one
// outbound:<destination> task per destination notified, in the request's
// transaction, before the records themselves are deleted.
func addOutboundTasks(ctx context.Context, tx Querier, deletionID string, reportKey int64, now time.Time) error {
	rows, err := tx.QueryContext(ctx, qRecordsOfReport, reportKey)
	if err != nil {
		return fmt.Errorf("read records of report: %w", err)
	}
	var records []string
	for rows.Next() {
		var id string
		if err := rows.Scan(recordPub(&id)); err != nil {
			rows.Close()
			return fmt.Errorf("read records of report: %w", err)
		}
		records = append(records, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	dests := map[string]bool{}
	for _, rec := range records {
		ds, err := EnqueueRecordDeleted(ctx, tx, rec, now)
		if err != nil {
			return err
		}
		for _, d := range ds {
			dests[d] = true
		}
	}
	ts, due := micros(now), micros(now.Add(DeletionDue))
	for d := range dests {
		if _, err := tx.ExecContext(ctx, `INSERT INTO deletion_tasks (deletion_id, copy, state, due_at, updated_at)
			VALUES ($1, $2, 'pending', $3, $4) ON CONFLICT (deletion_id, copy) DO NOTHING`, deletionID, PrefixOutbound+d, due, ts); err != nil {
			return fmt.Errorf("write deletion task: %w", err)
		}
	}
	return nil
}

// OutboundDeletedState sums up the record.deleted events of a report to one
// destination: done when every one was delivered, failed when one failed
// for good or the destination is disabled, pending otherwise.
func OutboundDeletedState(ctx context.Context, q Querier, reportID, destination string) (state string, err error) {
	key, err := reportKeyByID(ctx, q, reportID)
	if err != nil {
		return "", err
	}
	rows, err := q.QueryContext(ctx, qJobIDsOfReport, key)
	if err != nil {
		return "", fmt.Errorf("read jobs of report: %w", err)
	}
	var jobs []string
	for rows.Next() {
		var id string
		if err := rows.Scan(jobPub(&id)); err != nil {
			rows.Close()
			return "", fmt.Errorf("read jobs of report: %w", err)
		}
		jobs = append(jobs, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("read jobs of report: %w", err)
	}
	var total, delivered, bad int
	for _, job := range jobs {
		var t, d, b int
		if err := q.QueryRowContext(ctx, qDeletedEvents, job, destination, EventDeleted).Scan(&t, &d, &b); err != nil {
			return "", fmt.Errorf("read record.deleted events: %w", err)
		}
		total, delivered, bad = total+t, delivered+d, bad+b
	}
	switch {
	case bad > 0:
		return "failed", nil
	case delivered == total:
		return "done", nil
	default:
		return "pending", nil
	}
}
