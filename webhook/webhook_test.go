package webhook

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/stetlabs/stet"
)

// The published Standard Webhooks test vector.
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTimestamp = 1614265330
	vectorBody      = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

var vectorTime = time.Unix(vectorTimestamp, 0)

func webhookHeader(id string, ts int64, sig string) http.Header {
	h := http.Header{}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	h.Set("webhook-signature", sig)
	return h
}

func newTestVerifier(t *testing.T, secrets ...string) *Verifier {
	t.Helper()
	v, err := NewVerifier(secrets, stet.NewManualClock(vectorTime))
	if err != nil {
		t.Fatalf("NewVerifier() = %v", err)
	}
	return v
}

func TestVerifyPublishedVector(t *testing.T) {
	t.Parallel()
	v := newTestVerifier(t, vectorSecret)
	h := webhookHeader(vectorID, vectorTimestamp, vectorSignature)
	if err := v.Verify(h, []byte(vectorBody)); err != nil {
		t.Errorf("Verify(vector) = %v, want nil", err)
	}
	// The same key without the prefix is the same secret.
	bare := newTestVerifier(t, strings.TrimPrefix(vectorSecret, "whsec_"))
	if err := bare.Verify(h, []byte(vectorBody)); err != nil {
		t.Errorf("Verify(vector) with the bare base64 secret = %v, want nil", err)
	}
}

func TestSignPublishedVector(t *testing.T) {
	t.Parallel()
	got, err := Sign(vectorSecret, vectorID, vectorTime, []byte(vectorBody))
	if err != nil || got != vectorSignature {
		t.Errorf("Sign(vector) = %q, %v, want %q", got, err, vectorSignature)
	}
}

func TestInteropWithReferenceLibrary(t *testing.T) {
	t.Parallel()
	secret := "whsec_" + "c3RldC1pbnRlcm9wLXRlc3Qta2V5LTMyLWJ5dGVzISE="
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatalf("standardwebhooks.NewWebhook() = %v", err)
	}
	ts := vectorTime.Add(42 * time.Second)
	body := []byte(`{"external_id":"report-001","revision":1,"text":"x"}`)

	theirs, err := wh.Sign("msg_interop", ts, body)
	if err != nil {
		t.Fatalf("standardwebhooks Sign() = %v", err)
	}
	v := newTestVerifier(t, secret)
	if err := v.Verify(webhookHeader("msg_interop", ts.Unix(), theirs), body); err != nil {
		t.Errorf("Verify(reference signature %q) = %v, want nil", theirs, err)
	}

	ours, err := Sign(secret, "msg_interop", ts, body)
	if err != nil {
		t.Fatalf("Sign() = %v", err)
	}
	if ours != theirs {
		t.Errorf("Sign() = %q, reference library signs %q", ours, theirs)
	}
	// The reference Verify reads the wall clock; the timestamp check is
	// ours to test, so only the signature is checked here.
	if err := wh.VerifyIgnoringTimestamp(body, webhookHeader("msg_interop", ts.Unix(), ours)); err != nil {
		t.Errorf("reference Verify(our signature %q) = %v, want nil", ours, err)
	}
	if err := wh.VerifyIgnoringTimestamp(append(body, ' '), webhookHeader("msg_interop", ts.Unix(), ours)); err == nil {
		t.Errorf("reference Verify(our signature, other body) = nil, want an error")
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	const (
		oldSecret   = "whsec_b2xkLXNlY3JldC1vbGQtc2VjcmV0LW9sZA=="
		newSecret   = "whsec_bmV3LXNlY3JldC1uZXctc2VjcmV0LW5ldw=="
		otherSecret = "whsec_b3RoZXItc2VjcmV0LW90aGVyLXNlY3JldA=="
	)
	body := []byte(`{"external_id":"report-001","revision":1,"text":"hello"}`)
	now := vectorTime.Unix()
	sign := func(secret string, ts int64, b []byte) string {
		t.Helper()
		s, err := Sign(secret, "msg_1", time.Unix(ts, 0), b)
		if err != nil {
			t.Fatalf("Sign() = %v", err)
		}
		return s
	}
	valid := sign(oldSecret, now, body)
	without := func(name string) http.Header {
		h := webhookHeader("msg_1", now, valid)
		h.Del(name)
		return h
	}
	withTimestamp := func(ts string) http.Header {
		h := webhookHeader("msg_1", now, valid)
		h.Set("webhook-timestamp", ts)
		return h
	}
	v2 := "v2," + strings.TrimPrefix(valid, "v1,")

	tests := []struct {
		name    string
		secrets []string
		header  http.Header
		body    []byte
		want    error
	}{
		{"valid", []string{oldSecret}, webhookHeader("msg_1", now, valid), body, nil},
		{"missing webhook-id", []string{oldSecret}, without("webhook-id"), body, ErrMissingHeaders},
		{"missing webhook-timestamp", []string{oldSecret}, without("webhook-timestamp"), body, ErrMissingHeaders},
		{"missing webhook-signature", []string{oldSecret}, without("webhook-signature"), body, ErrMissingHeaders},
		{"empty header", []string{oldSecret}, http.Header{}, body, ErrMissingHeaders},
		{"non-numeric timestamp", []string{oldSecret}, withTimestamp("yesterday"), body, ErrBadTimestamp},
		{"fractional timestamp", []string{oldSecret}, withTimestamp("1614265330.5"), body, ErrBadTimestamp},
		{"signed timestamp", []string{oldSecret}, withTimestamp("+1614265330"), body, ErrBadTimestamp},
		{"leading zero", []string{oldSecret}, withTimestamp("01614265330"), body, ErrBadTimestamp},
		{"overflowing timestamp", []string{oldSecret}, withTimestamp("99999999999999999999"), body, ErrBadTimestamp},
		{"6 minutes old", []string{oldSecret}, webhookHeader("msg_1", now-360, sign(oldSecret, now-360, body)), body, ErrStaleTimestamp},
		{"6 minutes ahead", []string{oldSecret}, webhookHeader("msg_1", now+360, sign(oldSecret, now+360, body)), body, ErrStaleTimestamp},
		{"5 minutes old", []string{oldSecret}, webhookHeader("msg_1", now-300, sign(oldSecret, now-300, body)), body, nil},
		{"5 minutes ahead", []string{oldSecret}, webhookHeader("msg_1", now+300, sign(oldSecret, now+300, body)), body, nil},
		{"tampered body", []string{oldSecret}, webhookHeader("msg_1", now, valid), []byte(strings.Replace(string(body), "hello", "hellO", 1)), ErrNoMatchingSignature},
		{"tampered id", []string{oldSecret}, webhookHeader("msg_2", now, valid), body, ErrNoMatchingSignature},
		{"tampered timestamp", []string{oldSecret}, webhookHeader("msg_1", now+1, valid), body, ErrNoMatchingSignature},
		{"wrong secret", []string{otherSecret}, webhookHeader("msg_1", now, valid), body, ErrNoMatchingSignature},
		{"rotation: signed with the second secret", []string{newSecret, oldSecret}, webhookHeader("msg_1", now, valid), body, nil},
		{"rotation: only the second signature matches", []string{oldSecret}, webhookHeader("msg_1", now, sign(otherSecret, now, body)+" "+valid), body, nil},
		{"rotation: no signature matches any secret", []string{newSecret, oldSecret}, webhookHeader("msg_1", now, sign(otherSecret, now, body)), body, ErrNoMatchingSignature},
		{"v2 entry ignored", []string{oldSecret}, webhookHeader("msg_1", now, v2), body, ErrNoMatchingSignature},
		{"v2 entry ignored beside v1", []string{oldSecret}, webhookHeader("msg_1", now, v2+" "+valid), body, nil},
		{"garbage entries ignored", []string{oldSecret}, webhookHeader("msg_1", now, "v1 v1,@@@ ,, v1,"+" "+valid), body, nil},
		{"truncated signature", []string{oldSecret}, webhookHeader("msg_1", now, valid[:len(valid)-4]), body, ErrNoMatchingSignature},
		{"unsigned header", []string{oldSecret}, webhookHeader("msg_1", now, "v1,"), body, ErrNoMatchingSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := newTestVerifier(t, tt.secrets...)
			err := v.Verify(tt.header, tt.body)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Errorf("Verify(%s) = %v, want %v", tt.name, err, tt.want)
			}
		})
	}
}

func TestNewVerifierErrors(t *testing.T) {
	t.Parallel()
	const bad = "whsec_not*base64!SECRETCANARY"
	tests := []struct {
		name    string
		secrets []string
	}{
		{"no secrets", nil},
		{"empty secret", []string{""}},
		{"prefix only", []string{"whsec_"}},
		{"not base64", []string{bad}},
		{"one bad among good", []string{vectorSecret, bad}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v, err := NewVerifier(tt.secrets, nil)
			if err == nil || v != nil {
				t.Fatalf("NewVerifier(%s) = %v, %v, want an error", tt.name, v, err)
			}
			if strings.Contains(err.Error(), "CANARY") || strings.Contains(err.Error(), "not*base64") {
				t.Errorf("NewVerifier(%s) error %q quotes the secret", tt.name, err)
			}
		})
	}
	if _, err := Sign(bad, "msg", vectorTime, nil); err == nil || strings.Contains(err.Error(), "CANARY") {
		t.Errorf("Sign(bad secret) error = %v, want an error without the secret", err)
	}
}

// The sentinels are shown to senders: they must not depend on the request.
func TestVerifyErrorsAreStatic(t *testing.T) {
	t.Parallel()
	for _, err := range []error{ErrMissingHeaders, ErrBadTimestamp, ErrStaleTimestamp, ErrNoMatchingSignature} {
		if msg := err.Error(); msg == "" || strings.ToLower(msg[:1]) != msg[:1] {
			t.Errorf("sentinel %q: want a lowercase, non-empty message", msg)
		}
	}
	v := newTestVerifier(t, vectorSecret)
	err := v.Verify(webhookHeader("msg_CANARY", vectorTimestamp, "v1,Q0FOQVJZ"), []byte("CANARY body"))
	if !errors.Is(err, ErrNoMatchingSignature) || strings.Contains(err.Error(), "CANARY") {
		t.Errorf("Verify(canary) = %v, want ErrNoMatchingSignature without request data", err)
	}
}

func TestVerifySystemClock(t *testing.T) {
	t.Parallel()
	v, err := NewVerifier([]string{vectorSecret}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The published vector is years old: with the wall clock it is stale.
	if err := v.Verify(webhookHeader(vectorID, vectorTimestamp, vectorSignature), []byte(vectorBody)); !errors.Is(err, ErrStaleTimestamp) {
		t.Errorf("Verify(old vector, system clock) = %v, want ErrStaleTimestamp", err)
	}
}
