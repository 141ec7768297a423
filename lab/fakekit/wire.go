package fakekit

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"time"
)

// Marshal encodes v as provider APIs do: no HTML escaping (<, > and & stay
// as they are), no trailing newline. It panics on a value that cannot be
// encoded: a fake's own wire types always can.
func Marshal(v any) []byte {
	b, err := encode(v, "")
	if err != nil {
		panic("fakekit: marshal: " + err.Error())
	}
	return b
}

// MarshalIndent is Marshal with each level indented by indent, for APIs
// that pretty-print their answers.
func MarshalIndent(v any, indent string) []byte {
	b, err := encode(v, indent)
	if err != nil {
		panic("fakekit: marshal: " + err.Error())
	}
	return b
}

func encode(v any, indent string) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if indent != "" {
		enc.SetIndent("", indent)
	}
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// Cut returns the first half of s, never valid JSON: the answer of a
// truncated-output fault.
func Cut(s string) string {
	s = s[:len(s)/2]
	if json.Valid([]byte(s)) {
		s = "{" + s
	}
	return s
}

// MergeHeader sets every key of extra over h, replacing h's values; a key
// with no values deletes it from h.
func MergeHeader(h, extra http.Header) {
	for k, vs := range extra {
		h.Del(k)
		for _, v := range vs {
			h.Add(k, v)
		}
	}
}

// RandomHex returns n random bytes in hex (2n characters).
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// RandomString returns n characters drawn from alphabet (at most 256
// characters long).
func RandomString(alphabet string, n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// UUIDv4 returns a random RFC 9562 version 4 UUID.
func UUIDv4() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return formatUUID(b)
}

// UUIDv7 returns an RFC 9562 version 7 UUID for t: time-ordered, random
// below the millisecond.
func UUIDv7(t time.Time) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	ms := uint64(t.UnixMilli())
	binary.BigEndian.PutUint16(b[0:2], uint16(ms>>32))
	binary.BigEndian.PutUint32(b[2:6], uint32(ms))
	b[6] = b[6]&0x0f | 0x70
	b[8] = b[8]&0x3f | 0x80
	return formatUUID(b)
}

func formatUUID(b [16]byte) string {
	s := hex.EncodeToString(b[:])
	return s[0:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:32]
}
