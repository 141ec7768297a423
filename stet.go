// Package stet holds the domain of stet: crash-safe, exactly-once structured
// extraction over sensitive documents. It defines the nouns (reports,
// revisions, jobs, attempts, artifacts, review records), the failure classes
// that decide retries, the processor seam, and the error type whose message is
// safe to show a caller.
//
// This package imports only the standard library. It must never hold document
// text in a form that can reach a log: see Text.
package stet

import (
	"crypto/rand"
	"encoding/binary"
	"strings"
	"sync"
	"time"
)

// Clock tells the time. Tests inject one to move past a 24-hour window
// without sleeping.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock, in UTC.
type SystemClock struct{}

// Now returns the current UTC time.
func (SystemClock) Now() time.Time { return time.Now().UTC() }

// ManualClock is a Clock that moves only when told. It is safe for concurrent use.
type ManualClock struct {
	mu sync.Mutex
	t  time.Time
}

// NewManualClock returns a clock stopped at t.
func NewManualClock(t time.Time) *ManualClock { return &ManualClock{t: t.UTC()} }

// Now returns the clock's current time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// crockford is the Crockford base32 alphabet: no I, L, O or U.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

var idMu sync.Mutex
var idLast [16]byte

// NewID returns a new identifier with the given prefix ("job", "rep", …):
// the prefix, an underscore and 26 characters of a ULID (48 bits of
// milliseconds, 80 random bits). IDs made in one process sort by creation
// time. The ledger stores one as its 16 bytes (ParseID, FormatID).
func NewID(prefix string, now time.Time) string {
	var b [16]byte
	ms := uint64(now.UnixMilli())
	binary.BigEndian.PutUint16(b[0:2], uint16(ms>>32))
	binary.BigEndian.PutUint32(b[2:6], uint32(ms))
	idMu.Lock()
	if string(b[:6]) == string(idLast[:6]) {
		// Same millisecond: increment the random part so IDs stay ordered.
		b = idLast
		for i := 15; i >= 6; i-- {
			b[i]++
			if b[i] != 0 {
				break
			}
		}
	} else {
		_, _ = rand.Read(b[6:])
	}
	idLast = b
	idMu.Unlock()

	return FormatID(prefix, b)
}

// FormatID returns the identifier with the given prefix whose ULID is the
// 16 bytes b: the prefix, an underscore and 26 base32 digits. The ledger
// stores an ID as those bytes and shows it with FormatID.
func FormatID(prefix string, b [16]byte) string {
	var sb strings.Builder
	sb.Grow(len(prefix) + 27)
	sb.WriteString(prefix)
	sb.WriteByte('_')
	// 128 bits as 26 base32 digits, most significant first.
	hi := binary.BigEndian.Uint64(b[0:8])
	lo := binary.BigEndian.Uint64(b[8:16])
	var out [26]byte
	for i := 25; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	sb.Write(out[:])
	return sb.String()
}

// ParseID splits an identifier made by NewID into its prefix and the 16
// bytes of its ULID. ok is false for a string that is not such an ID: no
// underscore, not 26 base32 digits after it, or more than 128 bits.
func ParseID(id string) (prefix string, b [16]byte, ok bool) {
	i := strings.LastIndexByte(id, '_')
	if i < 0 || len(id)-i-1 != 26 {
		return "", b, false
	}
	var hi, lo uint64
	for k, c := range []byte(id[i+1:]) {
		d := crockfordValue(c)
		if d < 0 || (k == 0 && d > 7) { // 26 digits carry 130 bits: the first holds 3
			return "", b, false
		}
		hi = hi<<5 | lo>>59
		lo = lo<<5 | uint64(d)
	}
	binary.BigEndian.PutUint64(b[0:8], hi)
	binary.BigEndian.PutUint64(b[8:16], lo)
	return id[:i], b, true
}

// crockfordValue is the value of a base32 digit as NewID writes it
// (uppercase), or -1.
func crockfordValue(c byte) int {
	return strings.IndexByte(crockford, c)
}

// IDTime returns the time a NewID value was made at (to the millisecond):
// the first ten base32 digits after the prefix are its 48-bit Unix
// milliseconds. ok is false for a string that is not such an ID.
func IDTime(id string) (t time.Time, ok bool) {
	i := strings.LastIndexByte(id, '_')
	if i < 0 || len(id)-i-1 != 26 {
		return time.Time{}, false
	}
	var ms uint64
	for _, c := range []byte(id[i+1 : i+11]) {
		d := crockfordValue(c)
		if d < 0 {
			return time.Time{}, false
		}
		ms = ms<<5 | uint64(d)
	}
	return time.UnixMilli(int64(ms)), true
}
