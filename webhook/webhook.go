// Package webhook is Standard Webhooks (standardwebhooks.com): verifying a
// source's signed delivery (the api package verifies intake) and signing
// one (the outbound package signs record events and alerts).
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stetlabs/stet"
)

// Standard Webhooks headers and parameters.
const (
	IDHeader               = "webhook-id"
	webhookTimestampHeader = "webhook-timestamp"
	webhookSignatureHeader = "webhook-signature"

	// signatureTolerance is how far a webhook-timestamp may be from our
	// clock, in either direction.
	signatureTolerance = 5 * time.Minute

	webhookSecretPrefix = "whsec_"
	signatureVersion    = "v1"
)

// Errors of Verify. Their messages are safe to show the sender.
var (
	ErrMissingHeaders      = errors.New("missing webhook-id, webhook-timestamp or webhook-signature header")
	ErrBadTimestamp        = errors.New("webhook-timestamp is not a unix time in seconds")
	ErrStaleTimestamp      = errors.New("webhook-timestamp is more than 5 minutes from the current time")
	ErrNoMatchingSignature = errors.New("no webhook-signature matches the request")
)

// Verifier checks Standard Webhooks signatures for one source. It holds every
// current secret of the source, so a secret can be rotated without refusing
// deliveries signed with the old one. It is safe for concurrent use.
type Verifier struct {
	keys  [][]byte
	clock stet.Clock
}

// NewVerifier returns a Verifier for secrets, each "whsec_" followed by the
// base64 key, or the base64 key alone. A nil clock means the system clock.
// An error names the secret by its position, never by its content.
func NewVerifier(secrets []string, clock stet.Clock) (*Verifier, error) {
	if len(secrets) == 0 {
		return nil, errors.New("webhook verifier: no secret")
	}
	if clock == nil {
		clock = stet.SystemClock{}
	}
	v := &Verifier{clock: clock}
	for i, s := range secrets {
		key, err := decodeSecret(s)
		if err != nil {
			return nil, fmt.Errorf("webhook verifier: secret %d: %w", i+1, err)
		}
		v.keys = append(v.keys, key)
	}
	return v, nil
}

// decodeSecret returns the HMAC key of a secret. Its errors never quote the
// secret: base64's own errors are replaced because they carry an offset into
// it.
func decodeSecret(secret string) ([]byte, error) {
	b64 := strings.TrimPrefix(strings.TrimSpace(secret), webhookSecretPrefix)
	if b64 == "" {
		return nil, errors.New("empty")
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		// Some senders drop the padding.
		key, err = base64.RawStdEncoding.DecodeString(b64)
	}
	if err != nil {
		return nil, errors.New("not valid base64 after the whsec_ prefix")
	}
	if len(key) == 0 {
		return nil, errors.New("empty key")
	}
	return key, nil
}

// Verify checks the Standard Webhooks signature of a request: body must be
// the raw request body, before any parsing. It returns nil if some v1
// signature in the webhook-signature header is the HMAC-SHA256, under any of
// the verifier's secrets, of "id.timestamp.body", and the timestamp is
// within 5 minutes of the clock. Every webhook-signature header line is
// considered. Otherwise it returns
// ErrMissingHeaders, ErrBadTimestamp, ErrStaleTimestamp or
// ErrNoMatchingSignature. Signatures of other versions are ignored.
func (v *Verifier) Verify(h http.Header, body []byte) error {
	id := h.Get(IDHeader)
	ts := h.Get(webhookTimestampHeader)
	// Several header lines are all considered, as one space-separated list.
	sigs := strings.Join(h.Values(webhookSignatureHeader), " ")
	if id == "" || ts == "" || strings.TrimSpace(sigs) == "" {
		return ErrMissingHeaders
	}
	sec, err := parseTimestamp(ts)
	if err != nil {
		return err
	}
	now := v.clock.Now()
	if t := time.Unix(sec, 0); now.Sub(t) > signatureTolerance || t.Sub(now) > signatureTolerance {
		return ErrStaleTimestamp
	}

	// Decode the offered v1 signatures once, then try every key on them.
	var offered [][]byte
	for entry := range strings.FieldsSeq(sigs) {
		version, sig, ok := strings.Cut(entry, ",")
		if !ok || version != signatureVersion {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(sig)
		if err != nil || len(raw) != sha256.Size {
			continue
		}
		offered = append(offered, raw)
	}
	if len(offered) == 0 {
		return ErrNoMatchingSignature
	}
	for _, key := range v.keys {
		want := mac(key, id, ts, body)
		for _, got := range offered {
			if hmac.Equal(got, want) {
				return nil
			}
		}
	}
	return ErrNoMatchingSignature
}

// parseTimestamp accepts unix seconds written as plain decimal digits. The
// header is signed as written, so a sign or leading zeros, which other
// implementations would normalize before signing, are refused.
func parseTimestamp(ts string) (int64, error) {
	if len(ts) > 1 && ts[0] == '0' {
		return 0, ErrBadTimestamp
	}
	for i := range len(ts) {
		if ts[i] < '0' || ts[i] > '9' {
			return 0, ErrBadTimestamp
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return 0, ErrBadTimestamp
	}
	return sec, nil
}

// mac returns HMAC-SHA256(key, id "." ts "." body) without copying body.
func mac(key []byte, id, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Sign returns the Standard Webhooks signature "v1,<base64>" of body sent as
// message id at time ts, under secret ("whsec_…" or bare base64). Put it in
// the webhook-signature header with webhook-id id and webhook-timestamp
// ts.Unix().
func Sign(secret string, id string, ts time.Time, body []byte) (string, error) {
	key, err := decodeSecret(secret)
	if err != nil {
		return "", fmt.Errorf("sign webhook: secret: %w", err)
	}
	sum := mac(key, id, strconv.FormatInt(ts.Unix(), 10), body)
	return signatureVersion + "," + base64.StdEncoding.EncodeToString(sum), nil
}
