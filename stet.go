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
// time, which keyset pagination relies on.
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
		d := strings.IndexByte(crockford, c)
		if d < 0 {
			return time.Time{}, false
		}
		ms = ms<<5 | uint64(d)
	}
	return time.UnixMilli(int64(ms)), true
}
