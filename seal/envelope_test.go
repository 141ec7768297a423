package seal_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/stetlabs/stet/seal"
)

func key(b byte) []byte { return bytes.Repeat([]byte{b}, seal.KeySize) }

func ring(t *testing.T, keys ...seal.MasterKey) *seal.Keyring {
	t.Helper()
	k, err := seal.NewKeyring(keys)
	if err != nil {
		t.Fatalf("NewKeyring: %v", err)
	}
	return k
}

func TestEnvelopeRoundTrip(t *testing.T) {
	t.Parallel()
	k := ring(t, seal.MasterKey{ID: "k1", Key: key(1)})
	dk, w, err := k.NewDataKey("rep_1")
	if err != nil {
		t.Fatal(err)
	}
	if w.KeyID != "k1" || w.DataKeyID != dk.ID() || w.Wrapped == "" {
		t.Fatalf("wrapped = %+v", w)
	}
	const text = "CANARY-7f3 patient text"
	s, err := dk.Seal([]byte(text), "revisions.text/rev_1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s, seal.SealedPrefix) || strings.Contains(s, "CANARY") {
		t.Fatalf("Seal = %q: not sealed, or the plaintext shows", s)
	}
	if id, ok := seal.SealedDataKeyID(s); !ok || id != dk.ID() {
		t.Fatalf("SealedDataKeyID = %q, %v; want %q", id, ok, dk.ID())
	}
	// A fresh nonce each time: the same plaintext seals differently.
	s2, _ := dk.Seal([]byte(text), "revisions.text/rev_1")
	if s2 == s {
		t.Fatal("two seals of the same value are equal: the nonce is not random")
	}
	// The unwrapped copy of the stored key opens it.
	dk2, err := k.Unwrap("rep_1", w)
	if err != nil {
		t.Fatal(err)
	}
	got, err := dk2.Open(s, "revisions.text/rev_1")
	if err != nil || string(got) != text {
		t.Fatalf("Open = %q, %v; want the plaintext", got, err)
	}
}

func TestEnvelopeRefuses(t *testing.T) {
	t.Parallel()
	k := ring(t, seal.MasterKey{ID: "k1", Key: key(1)})
	other := ring(t, seal.MasterKey{ID: "k1", Key: key(2)})
	dk, w, _ := k.NewDataKey("rep_1")
	dkB, _, _ := k.NewDataKey("rep_2")
	s, _ := dk.Seal([]byte("secret"), "artifacts.raw/art_1")
	flip := func(s string) string {
		body := s[strings.LastIndex(s, ":")+1:]
		b, _ := base64.StdEncoding.DecodeString(body)
		b[len(b)/2] ^= 1
		return s[:len(s)-len(body)] + base64.StdEncoding.EncodeToString(b)
	}
	cases := []struct {
		name  string
		open  func() ([]byte, error)
		wrong error
	}{
		{"tampered byte", func() ([]byte, error) { return dk.Open(flip(s), "artifacts.raw/art_1") }, seal.ErrOpen},
		{"another row", func() ([]byte, error) { return dk.Open(s, "artifacts.raw/art_2") }, seal.ErrOpen},
		{"another column", func() ([]byte, error) { return dk.Open(s, "artifacts.output/art_1") }, seal.ErrOpen},
		{"another report's key", func() ([]byte, error) { return dkB.Open(s, "artifacts.raw/art_1") }, seal.ErrOpen},
		{"not sealed", func() ([]byte, error) { return dk.Open("secret", "artifacts.raw/art_1") }, seal.ErrOpen},
		{"truncated", func() ([]byte, error) { return dk.Open(s[:len(s)-8], "artifacts.raw/art_1") }, seal.ErrOpen},
		{"wrong master key", func() ([]byte, error) { _, err := other.Unwrap("rep_1", w); return nil, err }, seal.ErrOpen},
		{"key moved to another report", func() ([]byte, error) { _, err := k.Unwrap("rep_2", w); return nil, err }, seal.ErrOpen},
	}
	for _, c := range cases {
		got, err := c.open()
		if !errors.Is(err, c.wrong) || got != nil {
			t.Errorf("%s: Open = %q, %v; want %v", c.name, got, err, c.wrong)
		}
	}
	// A key id the ring does not hold is a clear error, not ErrOpen.
	missing := ring(t, seal.MasterKey{ID: "k9", Key: key(1)})
	if _, err := missing.Unwrap("rep_1", w); err == nil || errors.Is(err, seal.ErrOpen) || !strings.Contains(err.Error(), "k1") {
		t.Errorf("Unwrap with key k1 missing = %v; want an error naming k1", err)
	}
}

func TestEnvelopeRotation(t *testing.T) {
	t.Parallel()
	old := ring(t, seal.MasterKey{ID: "k1", Key: key(1)})
	dk, w, _ := old.NewDataKey("rep_1")
	s, _ := dk.Seal([]byte("text"), "revisions.text/rev_1")

	// k2 is added in front: it seals, k1 still opens.
	both := ring(t, seal.MasterKey{ID: "k2", Key: key(2)}, seal.MasterKey{ID: "k1", Key: key(1)})
	if both.SealingKeyID() != "k2" {
		t.Fatalf("SealingKeyID = %q, want k2", both.SealingKeyID())
	}
	if _, err := both.Unwrap("rep_1", w); err != nil {
		t.Fatalf("Unwrap of a k1 key with k2,k1 = %v", err)
	}
	w2, err := both.Rewrap("rep_1", w)
	if err != nil {
		t.Fatal(err)
	}
	if w2.KeyID != "k2" || w2.DataKeyID != w.DataKeyID || w2.Wrapped == w.Wrapped {
		t.Fatalf("Rewrap = %+v from %+v; want k2, the same data key, a new wrapping", w2, w)
	}
	// k1 removed: the rewrapped key still opens the old value.
	onlyNew := ring(t, seal.MasterKey{ID: "k2", Key: key(2)})
	dk2, err := onlyNew.Unwrap("rep_1", w2)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := dk2.Open(s, "revisions.text/rev_1"); err != nil || string(got) != "text" {
		t.Fatalf("Open after rekey = %q, %v", got, err)
	}
	if _, err := onlyNew.Unwrap("rep_1", w); err == nil {
		t.Fatal("a k1-wrapped key opened without k1")
	}
}

func TestNewKeyringRejects(t *testing.T) {
	t.Parallel()
	cases := map[string][]seal.MasterKey{
		"none":      nil,
		"short key": {{ID: "k1", Key: key(1)[:16]}},
		"no id":     {{Key: key(1)}},
		"duplicate": {{ID: "k1", Key: key(1)}, {ID: "k1", Key: key(2)}},
	}
	for name, keys := range cases {
		if _, err := seal.NewKeyring(keys); err == nil {
			t.Errorf("NewKeyring(%s) = nil error, want one", name)
		}
	}
	a := ring(t, seal.MasterKey{ID: "k1", Key: key(1)})
	b := ring(t, seal.MasterKey{ID: "k1", Key: key(2)})
	if a.CheckValue("k1") == b.CheckValue("k1") || a.CheckValue("k1") == "" {
		t.Error("two different keys have the same check value")
	}
}

// The cost of the crypto alone, per value and per report: a floor under
// what `stetlab bench intake --encrypt` measures end to end.
func BenchmarkSeal1KiB(b *testing.B) {
	k, _ := seal.NewKeyring([]seal.MasterKey{{ID: "k1", Key: key(1)}})
	dk, _, _ := k.NewDataKey("rep_1")
	text := bytes.Repeat([]byte("x"), 1024)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		if _, err := dk.Seal(text, "revisions.text/rev_1"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUnwrapAndOpen1KiB(b *testing.B) {
	k, _ := seal.NewKeyring([]seal.MasterKey{{ID: "k1", Key: key(1)}})
	dk, w, _ := k.NewDataKey("rep_1")
	s, _ := dk.Seal(bytes.Repeat([]byte("x"), 1024), "revisions.text/rev_1")
	for b.Loop() {
		d, err := k.Unwrap("rep_1", w)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := d.Open(s, "revisions.text/rev_1"); err != nil {
			b.Fatal(err)
		}
	}
}
