package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/stetlabs/stet"
)

// Retention purges (docs/design.md §5). Each call purges at most limit rows in one
// statement; the sweeper runs each in its own short transaction, so a
// million rows never make one long transaction. Every purge follows the
// policy the row's revision recorded (by its hash), not the config in force.
var (
	// Text and metadata, only once no job of the revision can still need
	// them (committed, manual or cancelled).
	qPurgeText = `UPDATE revisions SET text = NULL, metadata = NULL, text_purged_at = $1
		WHERE id IN (SELECT v.id FROM revisions v
			WHERE v.policy_version = (SELECT id FROM policy_versions WHERE hash = $2) AND v.text_purged_at IS NULL AND v.received_at < $3
			  AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.revision_id = v.id AND j.state NOT IN ('committed', 'manual', 'cancelled'))
			LIMIT $4)`
	// Raw responses and normalized output, once the job is terminal (the
	// record stage reads the output).
	qPurgeArtifacts = `UPDATE artifacts SET raw = NULL, output = NULL, raw_purged_at = COALESCE(raw_purged_at, $1), output_purged_at = $1
		WHERE job_id IN (SELECT a.job_id FROM artifacts a JOIN jobs j ON j.id = a.job_id JOIN revisions v ON v.id = j.revision_id
			WHERE v.policy_version = (SELECT id FROM policy_versions WHERE hash = $2) AND a.output_purged_at IS NULL AND a.created_at < $3
			  AND j.state IN ('committed', 'manual', 'cancelled')
			LIMIT $4)`
	// Decided records' classification and note (a pending record keeps
	// what its reviewer must see).
	qPurgeRecords = `UPDATE review_records SET classification = NULL, note = NULL, classification_purged_at = $1, note_purged_at = $1
		WHERE id IN (SELECT r.id FROM review_records r JOIN jobs j ON j.id = r.job_id JOIN revisions v ON v.id = j.revision_id
			WHERE v.policy_version = (SELECT id FROM policy_versions WHERE hash = $2) AND r.classification_purged_at IS NULL AND r.state = 'decided' AND r.created_at < $3
			LIMIT $4)`
	// The decisions' classifications and notes of records whose own were
	// purged.
	qPurgeDecisions = `UPDATE decisions SET classification = NULL, note = NULL, sealed = 0, purged_at = $1
		WHERE purged_at IS NULL AND record_id IN (SELECT r.id FROM review_records r WHERE r.classification_purged_at IS NOT NULL)`
	// Delivery receipts past the replay horizon: a later replay is judged by
	// identity, revision and content.
	qDeleteReceipts = `DELETE FROM deliveries WHERE (source_id, delivery_key) IN (
			SELECT d.source_id, d.delivery_key FROM deliveries d JOIN jobs j ON j.id = d.job_id JOIN revisions v ON v.id = j.revision_id
			WHERE v.policy_version = (SELECT id FROM policy_versions WHERE hash = $1) AND d.received_at < $2 LIMIT $3)`
	qDeleteTombstones = `DELETE FROM tombstones WHERE identity_hash IN (
			SELECT identity_hash FROM tombstones WHERE expires_at <= $1 LIMIT $2)`
)

// RecordedPolicies returns every policy version revisions recorded, by hash.
func RecordedPolicies(ctx context.Context, q Querier) (map[string]*stet.Policy, error) {
	rows, err := q.QueryContext(ctx, `SELECT hash, content FROM policy_versions WHERE content IS NOT NULL`)
	if err != nil {
		return nil, fmt.Errorf("read policy versions: %w", err)
	}
	defer rows.Close()
	out := map[string]*stet.Policy{}
	for rows.Next() {
		var hash, content string
		if err := rows.Scan(&hash, &content); err != nil {
			return nil, err
		}
		var p stet.Policy
		if err := json.Unmarshal([]byte(content), &p); err != nil {
			return nil, fmt.Errorf("decode policy version %s: %w", hash, err)
		}
		out[hash] = &p
	}
	return out, rows.Err()
}

// Purge is one kind of retention purge.
type Purge string

// The purges, in the order the sweeper runs them.
const (
	PurgeText       Purge = "text"
	PurgeArtifacts  Purge = "artifacts"
	PurgeRecords    Purge = "records"
	PurgeReceipts   Purge = "receipts"
	PurgeTombstones Purge = "tombstones"
	// PurgeAudio deletes transcribed audio whose retention.audio ended
	// (docs/design.md §19); audio with none is purged with its transcript.
	PurgeAudio Purge = "audio"
)

// Purges lists every purge.
var Purges = []Purge{PurgeText, PurgeArtifacts, PurgeRecords, PurgeReceipts, PurgeTombstones, PurgeAudio}

// qPurgeAudio deletes audio past its purge time ($1 now, $2 limit).
const qPurgeAudio = `DELETE FROM revision_audio WHERE revision_id IN
	(SELECT revision_id FROM revision_audio WHERE purge_after IS NOT NULL AND purge_after <= $1 LIMIT $2)`

// PurgeBatch runs one bounded purge of kind for the rows recorded under
// policyHash that are older than cut (tombstones and audio: expired by now;
// the hash and cut are unused). It returns how many rows it purged; fewer than limit
// means nothing is left for now.
func PurgeBatch(ctx context.Context, q Querier, kind Purge, policyHash string, cut, now time.Time, limit int) (int, error) {
	var res interface{ RowsAffected() (int64, error) }
	var err error
	switch kind {
	case PurgeText:
		res, err = q.ExecContext(ctx, qPurgeText, micros(now), policyHash, micros(cut), limit)
	case PurgeArtifacts:
		res, err = q.ExecContext(ctx, qPurgeArtifacts, micros(now), policyHash, micros(cut), limit)
	case PurgeRecords:
		res, err = q.ExecContext(ctx, qPurgeRecords, micros(now), policyHash, micros(cut), limit)
		if err == nil {
			// The decisions of the records purged, with them.
			_, err = q.ExecContext(ctx, qPurgeDecisions, micros(now))
		}
	case PurgeReceipts:
		res, err = q.ExecContext(ctx, qDeleteReceipts, policyHash, micros(cut), limit)
	case PurgeTombstones:
		res, err = q.ExecContext(ctx, qDeleteTombstones, micros(now), limit)
	case PurgeAudio:
		res, err = q.ExecContext(ctx, qPurgeAudio, micros(now), limit)
	default:
		return 0, fmt.Errorf("purge: unknown kind %q", kind)
	}
	if err != nil {
		return 0, fmt.Errorf("purge %s: %w", kind, err)
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}
