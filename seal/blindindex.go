package seal

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// indexKeyRef names the blind-index key where a wrapped data key names its
// report: in the additional data of its wrapping.
const indexKeyRef = "stet:index"

// deriveIndexKey derives the blind-index key from a master key: the
// HMAC-SHA256 of a fixed label under it. A ledger derives it once, from the
// sealing key of the day encryption was turned on, and keeps it wrapped
// (NewIndexKey), so a later rotation of master keys leaves every stored
// index value valid.
func deriveIndexKey(key []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte("stet blind index v1"))
	return h.Sum(nil)
}

// IndexKey keys the ledger's blind index: the HMAC-SHA256 that replaces
// every hash a guessed value could be confirmed against (identity, content
// and body hashes) once encryption is on. Without the key, a copy of the
// database confirms nothing.
type IndexKey struct {
	key []byte
}

// NewIndexKey derives the blind-index key from the sealing key and wraps it
// with that key for the ledger to store.
func (k *Keyring) NewIndexKey() (*IndexKey, WrappedKey, error) {
	m := k.keys[0]
	w, err := k.wrap(m, indexKeyRef, "index", m.index)
	if err != nil {
		return nil, WrappedKey{}, err
	}
	return &IndexKey{key: m.index}, w, nil
}

// UnwrapIndexKey opens the ledger's stored blind-index key.
func (k *Keyring) UnwrapIndexKey(w WrappedKey) (*IndexKey, error) {
	raw, err := k.unwrapRaw(indexKeyRef, w)
	if err != nil {
		return nil, fmt.Errorf("encryption: the blind-index key does not open: %w", err)
	}
	return &IndexKey{key: raw}, nil
}

// RewrapIndexKey wraps the stored blind-index key again with the sealing
// key, as Rewrap does a data key.
func (k *Keyring) RewrapIndexKey(w WrappedKey) (WrappedKey, error) {
	return k.Rewrap(indexKeyRef, w)
}

// Sum returns the blind-index value of a hash: the hex HMAC-SHA256 of kind
// (what the hash is of: "identity", "content", "body", "tombstone") and
// the hash's hex under the key. Kinds keep equal hashes of different
// things apart.
func (x *IndexKey) Sum(kind, hashHex string) string {
	h := hmac.New(sha256.New, x.key)
	h.Write([]byte("stet index v1\x00" + kind + "\x00" + hashHex))
	return hex.EncodeToString(h.Sum(nil))
}
