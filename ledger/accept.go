package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/seal"
)

// AcceptParams is one intake delivery, already verified and parsed.
type AcceptParams struct {
	TenantID   string
	SourceID   string
	Identity   stet.IdentityMode
	Revisions  stet.RevisionMode
	ExternalID string // empty for content identity
	Revision   int64  // the source's revision; 0 when stet numbers them
	Text       stet.Text
	// Audio, when set, is the report's clip (docs/design.md §19): Text is
	// then empty until its transcript is saved.
	Audio       *Audio
	Metadata    json.RawMessage
	DeliveryKey string // webhook-id
	BodySHA256  string // SHA-256 of the raw delivery body

	PolicyID       string
	PolicyHash     string
	ProfileID      string
	ProfileVersion int
	// Mode is how the job is dispatched: sync (an extract task is enqueued
	// with it) or batch (it waits for the batch assembler). Empty is sync.
	Mode stet.DispatchMode
	Now  time.Time
}

// Outcome is what intake decided about one delivery.
type Outcome string

// Outcomes.
const (
	OutcomeAccepted         Outcome = "accepted"          // a new job: 202
	OutcomeDuplicate        Outcome = "duplicate"         // resolves to an existing job: 200
	OutcomeDeliveryConflict Outcome = "delivery_conflict" // same webhook-id, another body: 409
	OutcomeRevisionConflict Outcome = "revision_conflict" // same identity and revision, other content: 409
	OutcomeGone             Outcome = "gone"              // the identity was deleted within the replay horizon: 410, nothing stored
)

// AcceptResult is the outcome of one delivery.
type AcceptResult struct {
	Outcome  Outcome
	JobID    string
	ReportID string
	Revision int64
	State    stet.JobState
}

// errReportExists says acceptOne found the report before inserting it.
var errReportExists = errors.New("report exists")

// ErrRetryItem means a concurrent writer won a race on a unique constraint
// inside this item; roll back to the item's savepoint and run it again.
var ErrRetryItem = errors.New("concurrent intake of the same identity; retry")

// IdentityHash returns the identity hash of a report: the SHA-256 of the
// external ID, or of the exact input bytes for content-identity sources.
func IdentityHash(mode stet.IdentityMode, externalID string, text stet.Text) string {
	if mode == stet.IdentityContent {
		return stet.SHA256Hex([]byte("content\x00" + text.Reveal()))
	}
	return stet.SHA256Hex([]byte("external_id\x00" + externalID))
}

// Intake statements. A receipt, a revision and a job name their report,
// revision and job by integer key (keys.go); what intake answers carries
// the public IDs.
var (
	qDeliveryByKey = `SELECT d.body_sha256, j.public_id, r.public_id, d.revision, j.state
		FROM deliveries d JOIN jobs j ON j.id = d.job_id JOIN reports r ON r.id = d.report_id
		WHERE d.source_id = $1 AND d.delivery_key = $2`
	qInsertReport = `INSERT INTO reports (public_id, tenant_id, source_id, external_id, identity_hash, created_at, updated_at,
			sealed, tombstone_hash)
		VALUES ($1, $2, $3, $4, $5, $6, $6, $7, $8)
		ON CONFLICT (tenant_id, source_id, identity_hash) DO NOTHING RETURNING id`
	// Lookups by hash take two forms ($3, $4: see forms), the same value
	// but while a ledger converts to the blind index.
	qReportByIdentity  = `SELECT id, public_id FROM reports WHERE tenant_id = $1 AND source_id = $2 AND identity_hash IN ($3, $4)`
	qRevisionByContent = `SELECT revision FROM revisions WHERE report_id = $1 AND content_sha256 IN ($2, $3) ORDER BY revision LIMIT 1`
	qNextRevision      = `SELECT COALESCE(MAX(revision), 0) + 1 FROM revisions WHERE report_id = $1`
	// A revision names its policy version by key: the version must be
	// recorded (RecordPolicy) before a revision is accepted under it.
	qInsertRevision = `INSERT INTO revisions (report_id, revision, content_sha256, text, metadata,
			policy_version, profile_id, profile_version, received_at, sealed)
		VALUES ($1, $2, $3, $4, $5, (SELECT id FROM policy_versions WHERE hash = $6), $7, $8, $9, $10)
		ON CONFLICT (report_id, revision) DO NOTHING RETURNING id`
	qRevisionByNumber = `SELECT id, content_sha256 FROM revisions WHERE report_id = $1 AND revision = $2`
	qInsertJob        = `INSERT INTO jobs (public_id, revision_id, report_id, tenant_id, source_id, revision,
			extraction_version, state, attempt, created_at, updated_at, mode)
		VALUES ($1, $2, $3, $4, $5, $6, $7, 'accepted', 0, $8, $8, $9)
		ON CONFLICT (revision_id, extraction_version) DO NOTHING RETURNING id`
	qJobByRevision  = `SELECT id, public_id, state FROM jobs WHERE revision_id = $1 AND extraction_version = $2`
	qInsertDelivery = `INSERT INTO deliveries (source_id, delivery_key, body_sha256, job_id, report_id, revision, received_at, sealed)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT (source_id, delivery_key) DO NOTHING RETURNING revision`
	qJobState       = `SELECT state FROM jobs WHERE public_id = $1`
	qLockLiveReport = `UPDATE reports SET updated_at = $1 WHERE id = $2 AND deleted_at IS NULL`
)

// acceptOne records one delivery inside tx: the delivery receipt, the
// report, the revision and the job. Unique constraints decide every race.
// newJob is true when the extract task is to be enqueued in the same tx.
//
// On ErrRetryItem the caller rolls back to a savepoint taken before the
// call and calls acceptOne again.
//
// With encryption on, the text and metadata are sealed under the report's
// data key, created with the report.
func (db *DB) acceptOne(ctx context.Context, tx Querier, p AcceptParams) (res AcceptResult, newJob bool, err error) {
	now := micros(p.Now)
	var dk *seal.DataKey

	// 0. A deleted identity stays deleted until the replay horizon: nothing
	// is stored, not even a receipt.
	identity := p.identity()
	if gone, err := db.tombstoned(ctx, tx, p.TenantID, p.SourceID, identity, p.Now); err != nil {
		return res, false, err
	} else if gone {
		return AcceptResult{Outcome: OutcomeGone}, false, nil
	}

	// 1. The delivery receipt: the same webhook-id answers as before.
	var d struct {
		bodySHA, jobID, reportID, state string
		revision                        int64
	}
	err = tx.QueryRowContext(ctx, qDeliveryByKey, p.SourceID, p.DeliveryKey).
		Scan(shaScan{&d.bodySHA}, jobPub(&d.jobID), reportPub(&d.reportID), &d.revision, &d.state)
	switch {
	case err == nil:
		if !db.matches(hashBody, d.bodySHA, p.BodySHA256) {
			return AcceptResult{Outcome: OutcomeDeliveryConflict}, false, nil
		}
		return AcceptResult{Outcome: OutcomeDuplicate, JobID: d.jobID, ReportID: d.reportID, Revision: d.revision,
			State: stet.JobState(d.state)}, false, nil
	case errors.Is(err, sql.ErrNoRows):
	default:
		return res, false, fmt.Errorf("read delivery: %w", err)
	}

	// 2. The report: one row per identity. While the ledger converts to
	// the blind index, a report stored under its plain hash is looked up
	// first: the insert's conflict sees only the blind form.
	reportID := stet.NewID(prefixReport, p.Now)
	var reportKey int64
	idStored, idPlain := db.forms(hashIdentity, identity)
	if idStored != idPlain {
		err = tx.QueryRowContext(ctx, qReportByIdentity, p.TenantID, p.SourceID, sha(idStored), sha(idPlain)).
			Scan(&reportKey, reportPub(&reportID))
		if err == nil {
			err = errReportExists
		} else if !errors.Is(err, sql.ErrNoRows) {
			return res, false, fmt.Errorf("read report: %w", err)
		}
	}
	var tombstone []byte
	if db.index != nil {
		tombstone = sha(db.tombstoneOf(p.TenantID, p.SourceID, identity))
	}
	var key newKey
	if !errors.Is(err, errReportExists) {
		if key, err = db.prepareReportKey(reportID, p.ExternalID); err != nil {
			return res, false, err
		}
		err = tx.QueryRowContext(ctx, qInsertReport,
			pub(reportID), p.TenantID, p.SourceID, key.externalID, sha(idStored), now,
			db.blindBit()|key.sealed, blob(tombstone)).Scan(&reportKey)
	}
	switch {
	case err == nil:
		// A deletion that committed since step 0 freed the identity hash:
		// run the item again, and step 0 answers gone.
		if gone, err := db.tombstoned(ctx, tx, p.TenantID, p.SourceID, identity, p.Now); err != nil {
			return res, false, err
		} else if gone {
			return res, false, ErrRetryItem
		}
		if dk, err = db.storeReportKey(ctx, tx, reportKey, key, p.Now); err != nil {
			return res, false, err
		}
	case errors.Is(err, sql.ErrNoRows), errors.Is(err, errReportExists):
		if errors.Is(err, sql.ErrNoRows) {
			if err := tx.QueryRowContext(ctx, qReportByIdentity,
				p.TenantID, p.SourceID, sha(idStored), sha(idPlain)).Scan(&reportKey, reportPub(&reportID)); err != nil {
				return res, false, fmt.Errorf("read report: %w", err)
			}
		}
		// Take the report row, as a deletion does: a deletion racing this
		// delivery either cancels its job or is seen here.
		r, err := tx.ExecContext(ctx, qLockLiveReport, now, reportKey)
		if err != nil {
			return res, false, fmt.Errorf("lock report: %w", err)
		}
		if n, _ := r.RowsAffected(); n != 1 {
			return AcceptResult{Outcome: OutcomeGone}, false, nil
		}
		if dk, err = db.writeKey(ctx, tx, reportID, p.Now); err != nil {
			return res, false, err
		}
	default:
		return res, false, fmt.Errorf("insert report: %w", err)
	}

	// 3. The revision, under its content hash as stored.
	contentSHA, contentPlain := db.forms(hashContent, p.contentSHA256())
	revision := p.Revision
	if p.Revisions == stet.RevisionsContent {
		// The same content as any earlier revision is that revision: a late
		// replay must not become a new revision.
		var existing int64
		err := tx.QueryRowContext(ctx, qRevisionByContent,
			reportKey, sha(contentSHA), sha(contentPlain)).Scan(&existing)
		switch {
		case err == nil:
			revision = existing
		case errors.Is(err, sql.ErrNoRows):
			if err := tx.QueryRowContext(ctx, qNextRevision, reportKey).Scan(&revision); err != nil {
				return res, false, fmt.Errorf("next revision: %w", err)
			}
		default:
			return res, false, fmt.Errorf("read revision: %w", err)
		}
	}
	var metadata sql.NullString
	if len(p.Metadata) > 0 {
		metadata = sql.NullString{String: string(p.Metadata), Valid: true}
	}
	binding := RevisionBinding("", reportID, contentSHA)
	text, err := sealString(dk, colRevisionText, binding, p.Text.Reveal())
	if err != nil {
		return res, false, err
	}
	if metadata, err = sealValue(dk, colRevisionMetadata, binding, metadata); err != nil {
		return res, false, err
	}
	sealed := sealedFlag(dk, colRevisionText, sql.NullString{String: text, Valid: true}) | sealedFlag(dk, colRevisionMetadata, metadata) |
		db.blindBit()
	var revisionKey int64
	err = tx.QueryRowContext(ctx, qInsertRevision,
		reportKey, revision, sha(contentSHA), text, metadata,
		p.PolicyHash, p.ProfileID, p.ProfileVersion, now, sealed).Scan(&revisionKey)
	switch {
	case err == nil:
		if p.Audio != nil {
			if err := insertAudio(ctx, tx, dk, revisionKey, binding, p.Audio); err != nil {
				return res, false, err
			}
		}
	case errors.Is(err, sql.ErrNoRows):
		var stored string
		if err := tx.QueryRowContext(ctx, qRevisionByNumber,
			reportKey, revision).Scan(&revisionKey, shaScan{&stored}); err != nil {
			return res, false, fmt.Errorf("read revision: %w", err)
		}
		if stored != contentSHA && stored != contentPlain {
			if p.Revisions == stet.RevisionsContent {
				// Another delivery took this number for other content.
				return res, false, ErrRetryItem
			}
			return AcceptResult{Outcome: OutcomeRevisionConflict, ReportID: reportID, Revision: revision}, false, nil
		}
	default:
		return res, false, fmt.Errorf("insert revision: %w", err)
	}

	// 4. The job: one per revision and extraction version.
	extractionVersion := (&stet.Profile{ID: p.ProfileID, Version: p.ProfileVersion}).ExtractionVersion()
	jobID := stet.NewID(prefixJob, p.Now)
	outcome := OutcomeAccepted
	state := stet.JobAccepted
	mode := stet.ModeSync
	if p.Mode == stet.ModeBatch {
		mode = stet.ModeBatch
	}
	var jobKey int64
	err = tx.QueryRowContext(ctx, qInsertJob,
		pub(jobID), revisionKey, reportKey, p.TenantID, p.SourceID, revision, extractionVersion, now, string(mode)).Scan(&jobKey)
	switch {
	case err == nil:
		newJob = true
	case errors.Is(err, sql.ErrNoRows):
		outcome = OutcomeDuplicate
		var s string
		if err := tx.QueryRowContext(ctx, qJobByRevision,
			revisionKey, extractionVersion).Scan(&jobKey, jobPub(&jobID), &s); err != nil {
			return res, false, fmt.Errorf("read job: %w", err)
		}
		state = stet.JobState(s)
	default:
		return res, false, fmt.Errorf("insert job: %w", err)
	}

	// 5. The receipt, so the same webhook-id answers the same.
	var got int64
	err = tx.QueryRowContext(ctx, qInsertDelivery,
		p.SourceID, p.DeliveryKey, sha(db.blind(hashBody, p.BodySHA256)), jobKey, reportKey, revision, now, db.blindBit()).Scan(&got)
	switch {
	case err == nil:
	case errors.Is(err, sql.ErrNoRows):
		return res, false, ErrRetryItem // a concurrent delivery with the same webhook-id won
	default:
		return res, false, fmt.Errorf("insert delivery: %w", err)
	}
	return AcceptResult{Outcome: outcome, JobID: jobID, ReportID: reportID, Revision: revision, State: state}, newJob, nil
}

func jobState(ctx context.Context, q Querier, jobID string) (stet.JobState, error) {
	var s string
	if err := q.QueryRowContext(ctx, qJobState, pub(jobID)).Scan(&s); err != nil {
		return "", fmt.Errorf("read job state: %w", err)
	}
	return stet.JobState(s), nil
}
