package ledger

import (
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/seal"
)

// Audio reports (docs/design.md §19). A revision delivered as audio is
// stored like a text revision whose text is empty, its content hash the
// SHA-256 of the audio bytes (so identity and revisions by content hash the
// audio), and its audio in revision_audio, sealed like text. The transcribe
// step of the extract stage writes the transcript as the revision's text,
// sealed under the same binding, and records who made it; the audio is then
// purged at once or kept until its retention ends.

// colRevisionAudio binds a sealed audio value to its column.
const colRevisionAudio = "revision_audio.data"

// Audio is a clip as a source delivered it.
type Audio struct {
	ContentType string
	Data        []byte
}

// SHA256 is the hex SHA-256 of the audio bytes.
func (a *Audio) SHA256() string { return stet.SHA256Hex(a.Data) }

// contentSHA256 is what identifies the delivery's content: its audio's
// SHA-256 when it carries audio, else its text's.
func (p *AcceptParams) contentSHA256() string {
	if p.Audio != nil {
		return p.Audio.SHA256()
	}
	return p.Text.SHA256()
}

// identity is the delivery's identity hash; under content identity an audio
// report is identified by its audio bytes.
func (p *AcceptParams) identity() string {
	if p.Audio != nil && p.Identity == stet.IdentityContent {
		return stet.SHA256Hex([]byte("audio\x00" + p.Audio.SHA256()))
	}
	return IdentityHash(p.Identity, p.ExternalID, p.Text)
}

// hasAudio reports whether a group carries audio: such a group is accepted
// item by item, where the audio row is written beside its revision.
func hasAudio(ps []AcceptParams) bool {
	for i := range ps {
		if ps[i].Audio != nil {
			return true
		}
	}
	return false
}

// insertAudio stores a new audio revision's clip, sealed under dk like its
// text (binding is the revision's).
func insertAudio(ctx context.Context, tx Querier, dk *seal.DataKey, revisionKey int64, binding string, a *Audio) error {
	data, err := sealString(dk, colRevisionAudio, binding, base64.StdEncoding.EncodeToString(a.Data))
	if err != nil {
		return err
	}
	sealed := 0
	if dk != nil {
		sealed = 1
	}
	if _, err := tx.ExecContext(ctx, `UPDATE revisions SET audio_sha256 = $1 WHERE id = $2`, a.SHA256(), revisionKey); err != nil {
		return fmt.Errorf("record audio: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO revision_audio (revision_id, content_type, data, sealed) VALUES ($1, $2, $3, $4)`,
		revisionKey, a.ContentType, data, sealed); err != nil {
		return fmt.Errorf("store audio: %w", err)
	}
	return nil
}

// ErrAudioGone means a revision awaiting its transcript no longer has its
// audio: a deletion took it.
var ErrAudioGone = errors.New("the revision's audio is gone")

// LoadAudio reads the audio of the job's revision, opened. It returns
// ErrAudioGone when none is stored.
func (db *DB) LoadAudio(ctx context.Context, q Querier, jobID string) (*Audio, error) {
	var reportID, legacy, content, contentType string
	var data sql.NullString
	var sealed int
	err := q.QueryRowContext(ctx, `SELECT rp.public_id, COALESCE(v.legacy_id, ''), v.content_sha256, a.content_type, a.data, a.sealed
		FROM jobs j JOIN revisions v ON v.id = j.revision_id JOIN reports rp ON rp.id = j.report_id
		JOIN revision_audio a ON a.revision_id = v.id WHERE j.public_id = $1`, pub(jobID)).
		Scan(reportPub(&reportID), &legacy, shaScan{&content}, &contentType, &data, &sealed)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrAudioGone
	}
	if err != nil {
		return nil, fmt.Errorf("load audio: %w", err)
	}
	data, err = db.opener(q).open(ctx, reportID, colRevisionAudio, RevisionBinding(legacy, reportID, content), data, sealed)
	if errors.Is(err, ErrKeyDestroyed) {
		return nil, ErrAudioGone
	}
	if err != nil {
		return nil, fmt.Errorf("load audio: %w", err)
	}
	b, err := base64.StdEncoding.DecodeString(data.String)
	if err != nil {
		return nil, fmt.Errorf("load audio: stored audio is not base64")
	}
	return &Audio{ContentType: contentType, Data: b}, nil
}

// Transcript is a transcribe attempt's outcome to save.
type Transcript struct {
	JobID       string
	Token       int64
	Attempt     AttemptResult
	Text        string
	Transcriber string
	Model       string
	// KeepAudio is the audio's retention once transcribed; zero purges it
	// in the same transaction.
	KeepAudio time.Duration
	Now       time.Time
}

// SaveTranscript saves a transcript in tx, fenced on the attempt token
// like an artifact: the attempt's outcome, the transcript as the revision's
// text (sealed under its data key) with its SHA-256, transcriber and model,
// the audio purged or given its purge time, and the job back in accepted
// with no lease, for its extraction. A stale worker gets stet.ErrLeaseLost
// (or ErrCancelled) and nothing is written.
func (db *DB) SaveTranscript(ctx context.Context, tx Querier, t Transcript) error {
	if err := HoldsJob(ctx, tx, t.JobID, t.Token); err != nil {
		return err
	}
	if err := FinishAttempt(ctx, tx, t.Attempt); err != nil {
		return err
	}
	var revisionKey int64
	var reportID, legacy, content string
	if err := tx.QueryRowContext(ctx, `SELECT v.id, rp.public_id, COALESCE(v.legacy_id, ''), v.content_sha256
		FROM jobs j JOIN revisions v ON v.id = j.revision_id JOIN reports rp ON rp.id = j.report_id WHERE j.public_id = $1`, pub(t.JobID)).
		Scan(&revisionKey, reportPub(&reportID), &legacy, shaScan{&content}); err != nil {
		return fmt.Errorf("read revision: %w", err)
	}
	dk, err := db.writeKey(ctx, tx, reportID, t.Now)
	if err != nil {
		return err
	}
	text, err := sealString(dk, colRevisionText, RevisionBinding(legacy, reportID, content), t.Text)
	if err != nil {
		return err
	}
	now := micros(t.Now)
	// The text's sealed bit follows the key; the metadata's is kept.
	if _, err := tx.ExecContext(ctx, `UPDATE revisions SET text = $1, sealed = (sealed & ~1) | $2, transcript_sha256 = $3,
			transcriber_id = $4, transcriber_model = $5, transcribed_at = $6 WHERE id = $7`,
		text, sealedFlag(dk, colRevisionText, sql.NullString{String: text, Valid: true}), stet.SHA256Hex([]byte(t.Text)),
		t.Transcriber, nullString(t.Model), now, revisionKey); err != nil {
		return fmt.Errorf("save transcript: %w", err)
	}
	if t.KeepAudio <= 0 {
		if _, err := tx.ExecContext(ctx, `DELETE FROM revision_audio WHERE revision_id = $1`, revisionKey); err != nil {
			return fmt.Errorf("purge audio: %w", err)
		}
	} else if _, err := tx.ExecContext(ctx, `UPDATE revision_audio SET purge_after = $1 WHERE revision_id = $2`,
		micros(t.Now.Add(t.KeepAudio)), revisionKey); err != nil {
		return fmt.Errorf("keep audio: %w", err)
	}
	return releaseJob(ctx, tx, t.JobID, t.Token, t.Now)
}

// AudioHeld reports whether the audio of the job's revision is still
// stored (retention.audio keeps it after its transcript).
func (db *DB) AudioHeld(ctx context.Context, jobID string) (bool, error) {
	var held bool
	err := db.r.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM jobs j JOIN revision_audio a ON a.revision_id = j.revision_id
		WHERE j.public_id = $1)`, pub(jobID)).Scan(&held)
	if err != nil {
		return false, fmt.Errorf("read audio: %w", err)
	}
	return held, nil
}
