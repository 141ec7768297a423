// Package seal is envelope encryption at rest: master keys from the
// config, a data key per report wrapped under them, values sealed under
// the data key and bound to their row, crypto-shredding by destroying the
// wrapped data key, and the blind index's key.
package seal

// Envelope encryption for text at rest (docs/design.md §5, encryption:). Each
// report has its own data key; the data key is stored only wrapped (sealed)
// by a master key from the environment. Destroying the wrapped data key
// makes every sealed copy of the report unreadable at once
// (crypto-shredding).
//
// A sealed value is text, so it fits the TEXT columns of both dialects:
//
//	stet:v1:<data key id>:<base64(nonce || ciphertext || tag)>
//
// AES-256-GCM with a random 96-bit nonce per value. The additional data
// binds the format version, the data key id, and the caller's context (the
// table, column and row ID), so a ciphertext moved to another row or column
// does not open. A wrapped data key is AES-256-GCM under the master key,
// with the report ID and the data key id as additional data.
//
// Nothing here logs, and no error carries a key or plaintext.

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// KeySize is the size of a master key and of a data key: AES-256.
const KeySize = 32

// SealedPrefix starts every sealed value. It is part of the format (and of
// the additional data), not a way to tell a sealed value from plaintext:
// plaintext may begin with it too, so whoever stores a value records
// whether it is sealed beside it.
const SealedPrefix = "stet:v1:"

// ErrOpen means a sealed value or a wrapped key does not open: the wrong
// key, a value moved to another row or column, tampering, or a data key
// destroyed by a deletion. It never says which, and never carries data.
var ErrOpen = errors.New("sealed value does not open")

// MasterKey is one configured master key: its id and 32 bytes.
type MasterKey struct {
	ID  string
	Key []byte
}

type master struct {
	id    string
	aead  cipher.AEAD
	check string
	index []byte // the blind-index key derived from this key (blindindex.go)
}

// Keyring holds the configured master keys. The first seals (wraps new and
// rewrapped data keys); every key opens. It is safe for concurrent use.
type Keyring struct {
	keys []*master
	byID map[string]*master
}

// NewKeyring builds a keyring from keys, the first of which seals. Every
// key must be 32 bytes and every id unique.
func NewKeyring(keys []MasterKey) (*Keyring, error) {
	if len(keys) == 0 {
		return nil, errors.New("encryption: no keys")
	}
	k := &Keyring{byID: map[string]*master{}}
	for _, mk := range keys {
		if mk.ID == "" {
			return nil, errors.New("encryption: a key has no id")
		}
		if len(mk.Key) != KeySize {
			return nil, fmt.Errorf("encryption: key %s is %d bytes, want %d", mk.ID, len(mk.Key), KeySize)
		}
		if k.byID[mk.ID] != nil {
			return nil, fmt.Errorf("encryption: duplicate key id %s", mk.ID)
		}
		a, err := newAEAD(mk.Key)
		if err != nil {
			return nil, err
		}
		m := &master{id: mk.ID, aead: a, check: checkValue(mk.Key), index: deriveIndexKey(mk.Key)}
		k.keys = append(k.keys, m)
		k.byID[mk.ID] = m
	}
	return k, nil
}

// checkValue is a key check value: it tells whether a key is the one a
// ledger was sealed with, and reveals nothing of the key.
func checkValue(key []byte) string {
	h := hmac.New(sha256.New, key)
	h.Write([]byte("stet key check v1"))
	return hex.EncodeToString(h.Sum(nil)[:16])
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("encryption: %w", err)
	}
	return cipher.NewGCM(b) // a 12-byte nonce
}

// SealingKeyID is the id of the key that wraps new data keys.
func (k *Keyring) SealingKeyID() string { return k.keys[0].id }

// IDs lists the key ids, the sealing key first.
func (k *Keyring) IDs() []string {
	out := make([]string, len(k.keys))
	for i, m := range k.keys {
		out[i] = m.id
	}
	return out
}

// Has reports whether the keyring holds the key id.
func (k *Keyring) Has(id string) bool { return k.byID[id] != nil }

// CheckValue returns the key check value of key id ("" for an unknown id).
func (k *Keyring) CheckValue(id string) string {
	if m := k.byID[id]; m != nil {
		return m.check
	}
	return ""
}

// WrappedKey is a data key as the ledger stores it: wrapped by the master
// key KeyID, for one report.
type WrappedKey struct {
	DataKeyID string
	KeyID     string // the master key that wrapped it
	Wrapped   string // base64(nonce || sealed key)
}

// DataKey is an unwrapped per-report data key. It seals and opens values.
type DataKey struct {
	id   string
	aead cipher.AEAD
}

// ID is the data key's id, written into every value it seals.
func (d *DataKey) ID() string { return d.id }

// NewDataKey makes a random data key for reportID and wraps it with the
// sealing key.
func (k *Keyring) NewDataKey(reportID string) (*DataKey, WrappedKey, error) {
	raw := make([]byte, KeySize)
	idb := make([]byte, 8)
	if _, err := rand.Read(raw); err != nil {
		return nil, WrappedKey{}, fmt.Errorf("encryption: random: %w", err)
	}
	if _, err := rand.Read(idb); err != nil {
		return nil, WrappedKey{}, fmt.Errorf("encryption: random: %w", err)
	}
	id := "dk" + hex.EncodeToString(idb)
	w, err := k.wrap(k.keys[0], reportID, id, raw)
	if err != nil {
		return nil, WrappedKey{}, err
	}
	a, err := newAEAD(raw)
	if err != nil {
		return nil, WrappedKey{}, err
	}
	return &DataKey{id: id, aead: a}, w, nil
}

func wrapAAD(reportID, dataKeyID string) []byte {
	return []byte("stet data key v1\x00" + reportID + "\x00" + dataKeyID)
}

func (k *Keyring) wrap(m *master, reportID, dataKeyID string, raw []byte) (WrappedKey, error) {
	nonce := make([]byte, m.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return WrappedKey{}, fmt.Errorf("encryption: random: %w", err)
	}
	out := m.aead.Seal(nonce, nonce, raw, wrapAAD(reportID, dataKeyID))
	return WrappedKey{DataKeyID: dataKeyID, KeyID: m.id, Wrapped: base64.StdEncoding.EncodeToString(out)}, nil
}

func (k *Keyring) unwrapRaw(reportID string, w WrappedKey) ([]byte, error) {
	m := k.byID[w.KeyID]
	if m == nil {
		return nil, fmt.Errorf("encryption: data key wrapped by key %s, which is not configured", w.KeyID)
	}
	b, err := base64.StdEncoding.DecodeString(w.Wrapped)
	if err != nil || len(b) < m.aead.NonceSize() {
		return nil, ErrOpen
	}
	n := m.aead.NonceSize()
	raw, err := m.aead.Open(nil, b[:n], b[n:], wrapAAD(reportID, w.DataKeyID))
	if err != nil || len(raw) != KeySize {
		return nil, ErrOpen
	}
	return raw, nil
}

// Unwrap opens a report's wrapped data key with the master key it names.
func (k *Keyring) Unwrap(reportID string, w WrappedKey) (*DataKey, error) {
	raw, err := k.unwrapRaw(reportID, w)
	if err != nil {
		return nil, err
	}
	a, err := newAEAD(raw)
	if err != nil {
		return nil, err
	}
	return &DataKey{id: w.DataKeyID, aead: a}, nil
}

// Rewrap wraps a report's data key again with the sealing key: the data
// key, and so every value it sealed, stays the same.
func (k *Keyring) Rewrap(reportID string, w WrappedKey) (WrappedKey, error) {
	raw, err := k.unwrapRaw(reportID, w)
	if err != nil {
		return WrappedKey{}, err
	}
	return k.wrap(k.keys[0], reportID, w.DataKeyID, raw)
}

func valueAAD(dataKeyID, bind string) []byte {
	return []byte(SealedPrefix + dataKeyID + "\x00" + bind)
}

// Seal seals plaintext, binding it to bind (the table, column and row ID
// the value is written to: "revisions.text/rev_…").
func (d *DataKey) Seal(plaintext []byte, bind string) (string, error) {
	nonce := make([]byte, d.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("encryption: random: %w", err)
	}
	out := d.aead.Seal(nonce, nonce, plaintext, valueAAD(d.id, bind))
	return SealedPrefix + d.id + ":" + base64.StdEncoding.EncodeToString(out), nil
}

// Open opens a value Seal sealed under this data key and bind. Any other
// value — another key, another row or column, a changed byte — is ErrOpen.
func (d *DataKey) Open(sealed, bind string) ([]byte, error) {
	id, body, ok := parseSealed(sealed)
	if !ok || id != d.id {
		return nil, ErrOpen
	}
	b, err := base64.StdEncoding.DecodeString(body)
	n := d.aead.NonceSize()
	if err != nil || len(b) < n {
		return nil, ErrOpen
	}
	out, err := d.aead.Open(nil, b[:n], b[n:], valueAAD(d.id, bind))
	if err != nil {
		return nil, ErrOpen
	}
	return out, nil
}

// SealedDataKeyID returns the id of the data key that sealed s.
func SealedDataKeyID(s string) (string, bool) {
	id, _, ok := parseSealed(s)
	return id, ok
}

func parseSealed(s string) (id, body string, ok bool) {
	rest, ok := strings.CutPrefix(s, SealedPrefix)
	if !ok {
		return "", "", false
	}
	return strings.Cut(rest, ":")
}
