package ledger

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/stetlabs/stet"
)

// Keys (migration 0019). Every row of the per-document tables has an
// integer key, id, and the tables refer to each other by it (report_id,
// revision_id, job_id are integers): a reference costs a few bytes instead
// of a 30-character text ID, and so does every index entry that holds
// one. Reports, jobs and review records also have the ID the API, the CLI
// and the audit log show ("rep_…", "job_…", "rec_…"): public_id, the 16
// bytes of its ULID, unique. Nothing above the ledger sees an integer key;
// the ledger turns a public ID into its stored form (pub) where it binds
// one and back (pubScan) where it reads one.
//
// SHA-256 values (identity, content, delivery body, minimized input) are
// stored as their 32 bytes and shown as lowercase hex.

// The prefixes of the public IDs the ledger stores in binary form.
const (
	prefixReport = "rep"
	prefixJob    = "job"
	prefixRecord = "rec"
)

// pub returns the stored form of a public ID: the 16 bytes of its ULID. A
// string that is not such an ID gives nil, which matches no row (and is
// refused by a NOT NULL column).
func pub(id string) []byte {
	_, b, ok := stet.ParseID(id)
	if !ok {
		return nil
	}
	return b[:]
}

// pubs is pub of each ID, for an array parameter (PostgreSQL).
func pubs(ids []string) [][]byte {
	out := make([][]byte, len(ids))
	for i, id := range ids {
		out[i] = pub(id)
	}
	return out
}

// formatPub shows a stored public ID with its prefix; "" for NULL.
func formatPub(prefix string, b []byte) (string, error) {
	if b == nil {
		return "", nil
	}
	if len(b) != 16 {
		return "", fmt.Errorf("stored %s ID has %d bytes, want 16", prefix, len(b))
	}
	return stet.FormatID(prefix, [16]byte(b)), nil
}

// pubScan scans a stored public ID into a string with its prefix: "" for
// NULL (a LEFT JOIN that found nothing).
type pubScan struct {
	prefix string
	dst    *string
}

func (s pubScan) Scan(v any) error {
	switch b := v.(type) {
	case nil:
		*s.dst = ""
		return nil
	case []byte:
		var err error
		*s.dst, err = formatPub(s.prefix, b)
		return err
	case string:
		if b == "" {
			*s.dst = ""
			return nil
		}
		return fmt.Errorf("scan %s ID: a string, not its stored form", s.prefix)
	default:
		return fmt.Errorf("scan %s ID: unexpected %T", s.prefix, v)
	}
}

func jobPub(dst *string) pubScan    { return pubScan{prefixJob, dst} }
func reportPub(dst *string) pubScan { return pubScan{prefixReport, dst} }
func recordPub(dst *string) pubScan { return pubScan{prefixRecord, dst} }

// sha returns the stored form of a hex SHA-256: its 32 bytes; nil for ""
// (NULL) or for a string that is not hex.
func sha(h string) []byte {
	if h == "" {
		return nil
	}
	b, err := hex.DecodeString(h)
	if err != nil {
		return nil
	}
	return b
}

// shaScan scans a stored SHA-256 into lowercase hex: "" for NULL.
type shaScan struct{ dst *string }

func (s shaScan) Scan(v any) error {
	switch b := v.(type) {
	case nil:
		*s.dst = ""
	case []byte:
		*s.dst = hex.EncodeToString(b)
	case string: // SQLite returns a value stored as text so; the ledger stores none
		*s.dst = b
	default:
		return fmt.Errorf("scan SHA-256: unexpected %T", v)
	}
	return nil
}

// blob is a []byte parameter that is NULL when empty.
func blob(b []byte) driver.Valuer { return nullBytes(b) }

type nullBytes []byte

func (b nullBytes) Value() (driver.Value, error) {
	if len(b) == 0 {
		return nil, nil
	}
	return []byte(b), nil
}

// SQL that turns a bound public ID into its row's integer key.
const (
	jobKeyOf    = `(SELECT id FROM jobs WHERE public_id = %s)`
	reportKeyOf = `(SELECT id FROM reports WHERE public_id = %s)`
	recordKeyOf = `(SELECT id FROM review_records WHERE public_id = %s)`
)

// jobKeySQL is the SQL of the integer key of the job whose public ID is
// parameter p, as jobKeySQL("$1"); reportKeySQL and recordKeySQL likewise.
func jobKeySQL(p string) string    { return fmt.Sprintf(jobKeyOf, p) }
func reportKeySQL(p string) string { return fmt.Sprintf(reportKeyOf, p) }
func recordKeySQL(p string) string { return fmt.Sprintf(recordKeyOf, p) }

// jobKeyByID and reportKeyByID return the key of the job or report with a
// public ID (notFound when there is none).
func jobKeyByID(ctx context.Context, q Querier, id string) (int64, error) {
	return keyByID(ctx, q, `SELECT id FROM jobs WHERE public_id = $1`, "job", id)
}

func reportKeyByID(ctx context.Context, q Querier, id string) (int64, error) {
	return keyByID(ctx, q, `SELECT id FROM reports WHERE public_id = $1`, "report", id)
}

func keyByID(ctx context.Context, q Querier, query, what, id string) (int64, error) {
	var k int64
	err := q.QueryRowContext(ctx, query, pub(id)).Scan(&k)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, notFound(what)
	}
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", what, err)
	}
	return k, nil
}

// Binding of sealed values (crypt.go): a value is sealed for its column and
// its row's binding, which new rows take from their public IDs. Rows
// migrated by 0019 keep the binding they were sealed under, their old
// text ID (legacy_id).

// RevisionBinding is the binding of a revision's sealed text and metadata
// (the rowID OpenSealed takes), given its legacy_id (or ""): its report's
// public ID and its content's SHA-256 (hex), both known before the
// revision's number is (a content revision's is drawn in the statement
// that writes it). Two revisions of a report with the same binding hold
// the same text. It holds a content hash: it goes in no error or log.
func RevisionBinding(legacy, reportID, contentSHA string) string {
	if legacy != "" {
		return legacy
	}
	return reportID + "/" + contentSHA
}

// ArtifactID is the ID an artifact shows, given its legacy_id (or "") and
// its job's public ID: its old text ID for one written before 0019, else
// "art_" and its job's ULID (a job has at most one artifact). It is also
// the binding of the artifact's sealed values.
func ArtifactID(legacy, jobID string) string {
	if legacy != "" {
		return legacy
	}
	_, b, ok := stet.ParseID(jobID)
	if !ok {
		return "art_" + jobID
	}
	return stet.FormatID("art", b)
}

// StoredID returns the stored form of a report's, job's or review record's
// public ID (its public_id column): for SQL outside the ledger that names
// such a row by its public ID, as the drills and tests do. Other tables
// refer to these rows by their integer key, id.
func StoredID(id string) []byte { return pub(id) }

// PublicID shows a stored public_id with its prefix ("rep", "job",
// "rec"); "" for an empty value.
func PublicID(prefix string, stored []byte) string {
	s, err := formatPub(prefix, stored)
	if err != nil {
		return ""
	}
	return s
}
