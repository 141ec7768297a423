package config

import (
	"encoding/base64"
	"regexp"
)

// Encryption is encryption at rest (docs/design.md §5, §8): the master keys that
// wrap each report's data key. The first key seals; every key opens.
type Encryption struct {
	Keys []EncryptionKey `yaml:"keys"`
}

// EncryptionKey is one master key: 32 random bytes, base64, in the
// environment variable KeyEnv. Key is filled in at load.
type EncryptionKey struct {
	ID     string `yaml:"id"`
	KeyEnv string `yaml:"key_env"`
	Key    []byte `yaml:"-"`
}

var keyIDPattern = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]{0,63}$`)

// validateEncryption checks encryption: every key has a well-formed,
// unique id and its variable holds 32 bytes in base64. The value is never
// echoed.
func (l *loader) validateEncryption(c *Config) {
	if c.Encryption == nil {
		return
	}
	if len(c.Encryption.Keys) == 0 {
		l.problem("encryption.keys", "required: at least one key (the first seals)")
		return
	}
	ids := map[string]bool{}
	for i := range c.Encryption.Keys {
		k := &c.Encryption.Keys[i]
		p := index("encryption.keys", i)
		switch {
		case k.ID == "":
			l.problem(join(p, "id"), "required")
		case !keyIDPattern.MatchString(k.ID):
			l.problem(join(p, "id"), "must be letters, digits, '.', '_' or '-' (at most 64)")
		case ids[k.ID]:
			l.problem(join(p, "id"), "duplicate key id %q", k.ID)
		}
		ids[k.ID] = true
		v := l.env(join(p, "key_env"), k.KeyEnv)
		if v == "" {
			continue
		}
		b, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			b, err = base64.RawStdEncoding.DecodeString(v)
		}
		switch {
		case err != nil:
			l.problem(join(p, "key_env"), "environment variable %s is not base64", k.KeyEnv)
		case len(b) != 32:
			l.problem(join(p, "key_env"), "environment variable %s holds %d bytes: a key is 32 random bytes, base64 (openssl rand -base64 32)", k.KeyEnv, len(b))
		default:
			k.Key = b
		}
	}
}

// KeysComplete reports whether every configured key was read (an operator
// command loaded without secrets may lack them).
func (e *Encryption) KeysComplete() bool {
	if e == nil {
		return false
	}
	for _, k := range e.Keys {
		if len(k.Key) == 0 {
			return false
		}
	}
	return len(e.Keys) > 0
}
