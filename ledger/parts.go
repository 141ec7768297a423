package ledger

// Parts (docs/design.md §16). A profile with parts extracts each part in
// a job of its own under the revision's job, the parent: StartParts fans
// the parent out, and each part's job then runs the stage machine like any
// job (its own attempts, fence and artifact). When a part's job settles
// (committed from its artifact, or manual), settlePart runs in the same
// transaction: once every part has settled it merges them (MergeParts,
// which the pipeline supplies: it holds the schemas) and writes the
// parent's one review record. Part jobs never have a record of their own.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/stetlabs/stet"
)

// PartSettled is what a commit of one part's job returns instead of a
// review record's ID while another part has not settled: the record is
// written when the last one does.
const PartSettled = "(part settled)"

// NewPart is one part's job to create under a revision's job.
type NewPart struct {
	PartID            string
	ExtractionVersion string // the parent's extraction version, "#" and the part's ID
}

const (
	qStartParts = `UPDATE jobs SET state = 'extracting', attempt = attempt + 1, lease_until = NULL, lease_holder = NULL,
			extracting_at = COALESCE(extracting_at, $1), updated_at = $1
		WHERE public_id = $2 AND attempt = $3 AND state IN ('accepted', 'waiting')
		RETURNING id, revision_id, report_id, tenant_id, source_id, revision, mode`
	qInsertPart = `INSERT INTO jobs (public_id, revision_id, report_id, tenant_id, source_id, revision, extraction_version,
			state, attempt, created_at, updated_at, mode, parent_job_id, part_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, 'accepted', 0, $8, $8, $9, $10, $11)
		ON CONFLICT (revision_id, extraction_version) DO NOTHING`
	// qLockParent takes the parent's row, so that of two parts settling at
	// once the second waits and then sees the first.
	qLockParent = `UPDATE jobs SET updated_at = $1 WHERE id = $2 AND state = 'extracting'
		RETURNING public_id, report_id, tenant_id, source_id, revision, extraction_version`
	qPartsOf = `SELECT j.public_id, COALESCE(j.part_id, ''), j.state, COALESCE(j.failure_class, ''),
			a.output, COALESCE(a.sealed, 0), COALESCE(a.legacy_id, ''), COALESCE(a.processor_id, ''), COALESCE(a.model, '')
		FROM jobs j LEFT JOIN artifacts a ON a.job_id = j.id WHERE j.parent_job_id = $1 ORDER BY j.id`
)

// StartParts fans the job out into its parts, in tx: the job, accepted or
// waiting under token expected, becomes extracting with no lease (its parts
// hold it, not a worker), and each part gets a job of its own, accepted, in
// the parent's dispatch mode. It returns the new part jobs' IDs, to
// enqueue; ErrNotClaimable if the job moved since it was read (another
// worker fanned it out, or a deletion cancelled it).
func (db *DB) StartParts(ctx context.Context, tx Querier, jobID string, expected int64, parts []NewPart, now time.Time) ([]string, error) {
	ts := micros(now)
	var key, revKey, reportKey, revision int64
	var tenant, source, mode string
	err := tx.QueryRowContext(ctx, qStartParts, ts, pub(jobID), expected).Scan(&key, &revKey, &reportKey, &tenant, &source, &revision, &mode)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotClaimable
	}
	if err != nil {
		return nil, fmt.Errorf("start parts: %w", err)
	}
	ids := make([]string, 0, len(parts))
	for _, p := range parts {
		id := stet.NewID(prefixJob, now)
		res, err := tx.ExecContext(ctx, qInsertPart, pub(id), revKey, reportKey, tenant, source, revision, p.ExtractionVersion,
			ts, mode, key, p.PartID)
		if err != nil {
			return nil, fmt.Errorf("start part: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// PartOutput is one settled part, for the merge.
type PartOutput struct {
	JobID        string
	PartID       string
	State        stet.JobState // committed or manual
	FailureClass stet.FailureClass
	Output       json.RawMessage // its artifact's output; nil for a part without one
	Processor    string
	Model        string
}

// Merged is what a job's settled parts come to.
type Merged struct {
	// Output is the merged object of the parts that have an artifact: the
	// record's classification (for a manual record, what the other parts
	// produced, shown to the reviewer).
	Output json.RawMessage
	// Kind is extracted, or manual when a part failed for good
	// (FailedPart) or the merged object fails the whole schema.
	Kind         stet.RecordKind
	FailureClass stet.FailureClass
	FailedPart   string
	Provenance   map[string]stet.FieldSource
}

// MergeParts merges the settled parts of a job of extraction version ev
// and checks the result against the profile's whole schema.
type MergeParts func(ev string, parts []PartOutput) (Merged, error)

// SetMergeParts gives the ledger the merge of a profile's parts. A process
// that commits jobs of a profile with parts must set it.
func (db *DB) SetMergeParts(f MergeParts) { db.merge.Store(&f) }

// settlePart runs when a part's job (a child of parentKey) has settled,
// in its transaction. While another part has not settled it returns
// PartSettled; when this was the last, it writes the parent's review
// record (with its merged artifact when no part failed) and returns its
// ID.
func (db *DB) settlePart(ctx context.Context, tx Querier, parentKey int64, now time.Time) (string, error) {
	var parentID, reportID, tenant, source, ev string
	var reportKey, revision int64
	err := tx.QueryRowContext(ctx, qLockParent, micros(now), parentKey).
		Scan(jobPub(&parentID), &reportKey, &tenant, &source, &revision, &ev)
	if errors.Is(err, sql.ErrNoRows) {
		return db.partRecord(ctx, tx, parentKey) // settled before, or cancelled by a deletion
	}
	if err != nil {
		return "", fmt.Errorf("lock parent job: %w", err)
	}
	if err := tx.QueryRowContext(ctx, `SELECT public_id FROM reports WHERE id = $1`, reportKey).Scan(reportPub(&reportID)); err != nil {
		return "", fmt.Errorf("read report: %w", err)
	}
	parts, err := db.partsOf(ctx, tx, parentKey, reportID)
	if err != nil {
		return "", err
	}
	for _, p := range parts {
		if p.State != stet.JobCommitted && p.State != stet.JobManual {
			return PartSettled, nil
		}
	}
	mp := db.merge.Load()
	if mp == nil {
		return "", errors.New("settle parts: no merge of parts in this process")
	}
	m, err := (*mp)(ev, parts)
	if err != nil {
		return "", fmt.Errorf("merge parts: %w", err)
	}
	var recordID string
	if m.Kind == stet.RecordExtracted {
		var processors []string
		for _, p := range parts {
			if !slices.Contains(processors, p.Processor) {
				processors = append(processors, p.Processor)
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE jobs SET state = 'extracted', extracted_at = $1, updated_at = $1, failure_class = NULL
			WHERE id = $2`, micros(now), parentKey); err != nil {
			return "", fmt.Errorf("mark parent extracted: %w", err)
		}
		if err := db.insertArtifact(ctx, tx, parentKey, reportKey, SaveArtifactParams{JobID: parentID, Output: m.Output,
			SchemaVersion: ev, ProcessorID: strings.Join(processors, "+"), Now: now}); err != nil {
			return "", err
		}
		if recordID, err = db.WriteRecord(ctx, tx, parentID, now); err != nil {
			return "", err
		}
	} else {
		if _, err := tx.ExecContext(ctx, `UPDATE jobs SET state = 'manual', failure_class = $1, committed_at = $2, updated_at = $2
			WHERE id = $3`, string(m.FailureClass), micros(now), parentKey); err != nil {
			return "", fmt.Errorf("mark parent manual: %w", err)
		}
		dk, err := db.writeKey(ctx, tx, reportID, now)
		if err != nil {
			return "", err
		}
		id := stet.NewID(prefixRecord, now)
		class, err := sealValue(dk, colClassification, id, sql.NullString{String: string(m.Output), Valid: len(m.Output) > 0})
		if err != nil {
			return "", err
		}
		recordID, err = insertRecord(ctx, tx, recordParams{id: id, jobID: parentID, jobKey: parentKey, reportID: reportID,
			reportKey: reportKey, tenantID: tenant, sourceID: source, revision: revision, kind: stet.RecordManual,
			classification: class.String, sealed: sealedFlag(dk, colClassification, class), failureClass: m.FailureClass, now: now})
		if err != nil {
			return "", err
		}
	}
	prov, err := json.Marshal(m.Provenance)
	if err != nil {
		return "", fmt.Errorf("provenance: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE review_records SET failed_part = $1, provenance = $2 WHERE public_id = $3`,
		nullString(m.FailedPart), string(prov), pub(recordID)); err != nil {
		return "", fmt.Errorf("record provenance: %w", err)
	}
	return recordID, nil
}

// partRecord is the parent's review record, or PartSettled if it has none.
func (db *DB) partRecord(ctx context.Context, q Querier, parentKey int64) (string, error) {
	var id string
	err := q.QueryRowContext(ctx, qRecordOfJob, parentKey).Scan(recordPub(&id))
	if errors.Is(err, sql.ErrNoRows) {
		return PartSettled, nil
	}
	if err != nil {
		return "", fmt.Errorf("read record: %w", err)
	}
	return id, nil
}

// partsOf reads the part jobs of parentKey, their artifacts' outputs
// opened.
func (db *DB) partsOf(ctx context.Context, q Querier, parentKey int64, reportID string) ([]PartOutput, error) {
	rows, err := q.QueryContext(ctx, qPartsOf, parentKey)
	if err != nil {
		return nil, fmt.Errorf("read parts: %w", err)
	}
	type row struct {
		PartOutput
		output sql.NullString
		sealed int
		legacy string
	}
	var rs []row
	for rows.Next() {
		var r row
		var state, class string
		if err := rows.Scan(jobPub(&r.JobID), &r.PartID, &state, &class, &r.output, &r.sealed, &r.legacy, &r.Processor, &r.Model); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read parts: %w", err)
		}
		r.State, r.FailureClass = stet.JobState(state), stet.FailureClass(class)
		rs = append(rs, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read parts: %w", err)
	}
	o := db.opener(q)
	out := make([]PartOutput, len(rs))
	for i, r := range rs {
		v, err := o.open(ctx, reportID, colArtifactOutput, ArtifactID(r.legacy, r.JobID), r.output, r.sealed)
		if err != nil {
			return nil, fmt.Errorf("read part %s: %w", r.PartID, err)
		}
		out[i] = r.PartOutput
		if v.Valid {
			out[i].Output = json.RawMessage(v.String)
		}
	}
	return out, nil
}

// commitPart is WriteRecord for the job of one part (key jobKey, in
// state) under parentKey: an extracted part becomes committed and settles;
// a part settled before returns what settlePart returned then.
func (db *DB) commitPart(ctx context.Context, tx Querier, jobKey, parentKey int64, state stet.JobState, now time.Time) (string, error) {
	switch state {
	case stet.JobCommitted, stet.JobManual:
		return db.partRecord(ctx, tx, parentKey)
	case stet.JobExtracted:
	default:
		return "", ErrNothingToCommit
	}
	res, err := tx.ExecContext(ctx, `UPDATE jobs SET state = 'committed', committed_at = $1, updated_at = $1 WHERE id = $2 AND state = 'extracted'`,
		micros(now), jobKey)
	if err != nil {
		return "", fmt.Errorf("commit part: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return db.partRecord(ctx, tx, parentKey) // another commit of this part came first
	}
	return db.settlePart(ctx, tx, parentKey, now)
}
