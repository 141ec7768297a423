package stet

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"
)

// Text is document text. Its String, GoString and LogValue methods print only
// its length and SHA-256, so document text cannot reach a log or an error
// message by accident. Use Reveal where the text must really be used.
type Text struct{ s string }

// NewText wraps s.
func NewText(s string) Text { return Text{s: s} }

// Reveal returns the text itself. Call it only where the text is sent to a
// permitted processor or stored.
func (t Text) Reveal() string { return t.s }

// Len returns the length of the text in bytes.
func (t Text) Len() int { return len(t.s) }

// SHA256 returns the hex SHA-256 of the text.
func (t Text) SHA256() string { return SHA256Hex([]byte(t.s)) }

// String prints a redacted description.
func (t Text) String() string {
	return fmt.Sprintf("text(len=%d sha256=%s)", len(t.s), t.SHA256()[:12])
}

// GoString prints the same redacted description as String.
func (t Text) GoString() string { return t.String() }

// LogValue prints only the length and hash.
func (t Text) LogValue() slog.Value {
	return slog.GroupValue(slog.Int("len", len(t.s)), slog.String("sha256", t.SHA256()))
}

// MarshalJSON refuses: text is never serialized by accident.
func (t Text) MarshalJSON() ([]byte, error) {
	return nil, fmt.Errorf("stet.Text is not serializable; call Reveal")
}

// SHA256Hex returns the lowercase hex SHA-256 of b.
func SHA256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// IdentityMode says how a source identifies its reports.
type IdentityMode string

// Identity modes.
const (
	IdentityExternalID IdentityMode = "external_id" // the source sends a stable external ID
	IdentityContent    IdentityMode = "content"     // the SHA-256 of the exact input bytes
)

// IdentityModes lists every identity mode.
var IdentityModes = []IdentityMode{IdentityExternalID, IdentityContent}

// RevisionMode says how revisions are numbered.
type RevisionMode string

// Revision modes.
const (
	RevisionsExplicit RevisionMode = "explicit" // the source sends a positive integer
	RevisionsContent  RevisionMode = "content"  // stet numbers 1, 2, 3… as the content changes
)

// RevisionModes lists every revision mode.
var RevisionModes = []RevisionMode{RevisionsExplicit, RevisionsContent}

// DispatchMode says whether a source's jobs call processors one at a time or
// through provider batches.
type DispatchMode string

// Dispatch modes.
const (
	ModeSync  DispatchMode = "sync"
	ModeBatch DispatchMode = "batch"
)

// DispatchModes lists every dispatch mode.
var DispatchModes = []DispatchMode{ModeSync, ModeBatch}

// Report is one source identity: (tenant, source, external ID), or the
// content hash for sources without IDs.
type Report struct {
	ID           string
	TenantID     string
	SourceID     string
	ExternalID   string // empty for content-identity sources
	IdentityHash string
	CreatedAt    time.Time
}

// Revision is one input revision of a report.
type Revision struct {
	ID             string
	ReportID       string
	Number         int64
	ContentSHA256  string
	PolicyID       string
	PolicyHash     string
	ProfileID      string
	ProfileVersion int
	ReceivedAt     time.Time
	TextPurged     bool
}
