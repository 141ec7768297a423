package app

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/stetlabs/stet/config"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/seal"
)

// Keyring builds the configured master keys; nil without encryption:, or
// when a key variable is unset (an operator command loaded without
// secrets).
func Keyring(cfg *config.Config) (*seal.Keyring, error) {
	if !cfg.Encryption.KeysComplete() {
		return nil, nil
	}
	var keys []seal.MasterKey
	for _, k := range cfg.Encryption.Keys {
		keys = append(keys, seal.MasterKey{ID: k.ID, Key: k.Key})
	}
	return seal.NewKeyring(keys)
}

// UseEncryption gives the ledger its keys and checks them against the
// ledger's key check values, so a wrong or missing key stops the start
// instead of failing later on values that do not open. A process that
// serves without encryption: says so in its log. Commands that only read
// IDs and states (openLedger) run without the keys.
func UseEncryption(ctx context.Context, db *ledger.DB, cfg *config.Config, log *slog.Logger, serving bool) error {
	k, err := Keyring(cfg)
	if err != nil {
		return err
	}
	if cfg.Encryption != nil && k == nil {
		// Every command that builds the pipeline may write text: never
		// in plaintext when encryption: is configured.
		return errors.New("encryption: a key variable of encryption.keys is unset; this command needs the keys")
	}
	if k != nil {
		db.UseKeyring(k)
	}
	if current, err := db.MigrationsCurrent(ctx); err != nil || !current {
		return nil // the caller's schema check says what to do
	}
	if err := db.CheckKeys(ctx, time.Now()); err != nil {
		return err
	}
	if serving && cfg.Encryption == nil {
		log.Warn("encryption at rest is off: document text is stored in plaintext; configure encryption: (docs/governance.md)")
	}
	return nil
}
