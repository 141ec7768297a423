package webhook

import (
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet"
)

// FuzzVerifyHeaders: Verify never panics on arbitrary headers and body, and
// what it accepts it no longer accepts once the body changes.
func FuzzVerifyHeaders(f *testing.F) {
	f.Add(vectorID, strconv.Itoa(vectorTimestamp), vectorSignature, []byte(vectorBody))
	f.Add(vectorID, strconv.Itoa(vectorTimestamp), "v2,abc v1,"+strings.Repeat("A", 43)+"= "+vectorSignature, []byte(vectorBody))
	f.Add("msg_1", "01614265330", "v1,", []byte(""))
	f.Add("msg_1", "+1614265330", "v1,!!!! ,,, v1", []byte("{}"))
	f.Add("", "", "", []byte(nil))
	f.Add(strings.Repeat("i", 300), "99999999999999999999", "v1,"+strings.Repeat("/", 44), []byte{0xff, 0xfe})
	f.Fuzz(func(t *testing.T, id, ts, sigs string, body []byte) {
		v := newTestVerifier(t, vectorSecret, "whsec_"+base64.StdEncoding.EncodeToString([]byte("a second secret of the source")))
		h := http.Header{}
		h.Set(IDHeader, id)
		h.Set(webhookTimestampHeader, ts)
		h.Set(webhookSignatureHeader, sigs)
		if v.Verify(h, body) != nil {
			return
		}
		if err := v.Verify(h, append(body, 'x')); err == nil {
			t.Fatalf("Verify(id %q, ts %q, sig %q) accepts the body with a byte added", id, ts, sigs)
		}
	})
}

// FuzzVerifySignature: a signature made with a random secret over (id,
// timestamp, body) verifies wherever it stands among other signature
// values; with one byte of the body, id or timestamp changed it never does.
func FuzzVerifySignature(f *testing.F) {
	f.Add([]byte("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), vectorID, int64(0), []byte(vectorBody), "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", uint16(0), byte(1))
	f.Add([]byte{0}, "m", int64(-299), []byte{}, "v2,x", uint16(7), byte(0x80))
	f.Add([]byte("0123456789abcdef0123456789abcdef"), "msg_"+strings.Repeat("z", 252), int64(299), []byte(`{"text":"é"}`), "", uint16(3), byte(0xff))
	f.Fuzz(func(t *testing.T, key []byte, id string, skew int64, body []byte, other string, at uint16, flip byte) {
		id = visibleASCII(id, 256)
		if len(key) == 0 || id == "" || flip == 0 {
			return
		}
		secret := "whsec_" + base64.StdEncoding.EncodeToString(key)
		v, err := NewVerifier([]string{secret}, stet.NewManualClock(vectorTime))
		if err != nil {
			t.Fatalf("NewVerifier(%d-byte key) = %v", len(key), err)
		}
		ts := vectorTime.Add(time.Duration(skew%int64(signatureTolerance/time.Second)) * time.Second)
		sig, err := Sign(secret, id, ts, body)
		if err != nil {
			t.Fatalf("Sign = %v", err)
		}
		// Other values around the signature: the fuzzer's, a v1 signature
		// over another body, and a signature of another version.
		wrong, _ := Sign(secret, id, ts, append([]byte("x"), body...))
		others := append(strings.Fields(other), wrong, "v2,"+strings.TrimPrefix(sig, "v1,"))
		values := append([]string(nil), others...)
		i := int(at) % (len(values) + 1)
		values = append(values[:i], append([]string{sig}, values[i:]...)...)
		header := func(id, ts string) http.Header {
			h := http.Header{}
			h.Set(IDHeader, id)
			h.Set(webhookTimestampHeader, ts)
			h.Set(webhookSignatureHeader, strings.Join(values, " "))
			return h
		}
		tss := strconv.FormatInt(ts.Unix(), 10)
		if err := v.Verify(header(id, tss), body); err != nil {
			t.Fatalf("Verify(signature %d of %q) = %v, want nil", i, values, err)
		}

		// Several header lines: the signature on one, the others on the rest.
		lines := http.Header{}
		lines.Set(IDHeader, id)
		lines.Set(webhookTimestampHeader, tss)
		line := int(at>>8) % (len(others) + 1)
		for _, o := range append(others[:line:line], append([]string{sig}, others[line:]...)...) {
			lines.Add(webhookSignatureHeader, o)
		}
		if err := v.Verify(lines, body); err != nil {
			t.Fatalf("Verify(signature on header line %d of %q) = %v, want nil", line, lines.Values(webhookSignatureHeader), err)
		}

		// One changed byte anywhere in body, id or timestamp.
		pos := int(at)
		if len(body) > 0 {
			b := append([]byte(nil), body...)
			b[pos%len(b)] ^= flip
			if v.Verify(header(id, tss), b) == nil {
				t.Fatalf("Verify accepts the body with byte %d changed", pos%len(b))
			}
		}
		if v.Verify(header(flipByte(id, pos, flip), tss), body) == nil {
			t.Fatalf("Verify accepts the id %q with byte %d changed", id, pos%len(id))
		}
		if v.Verify(header(id, flipByte(tss, pos, flip)), body) == nil {
			t.Fatalf("Verify accepts the timestamp %q with byte %d changed", tss, pos%len(tss))
		}
	})
}

// visibleASCII keeps the printable ASCII bytes of s other than space, at
// most max of them: what a sender puts in webhook-id.
func visibleASCII(s string, max int) string {
	b := make([]byte, 0, min(len(s), max))
	for i := 0; i < len(s) && len(b) < max; i++ {
		if s[i] > ' ' && s[i] < 0x7f {
			b = append(b, s[i])
		}
	}
	return string(b)
}

func flipByte(s string, pos int, flip byte) string {
	b := []byte(s)
	b[pos%len(b)] ^= flip
	return string(b)
}
