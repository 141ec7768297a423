package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/stetlabs/stet/config"
	"github.com/stetlabs/stet/ledger"
)

// The wiring every operator command shares: open the config's ledger, or
// the whole app, saying on stderr why not.

// openLedger opens the config's ledger for a read or operate command.
func openLedger(ctx context.Context, cfgPath string, stderr io.Writer) (*ledger.DB, int) {
	cfg, ok := loadOperatorConfig(cfgPath, stderr)
	if !ok {
		return nil, exitUsage
	}
	if !ledgerExists(cfg.Database, stderr) {
		return nil, exitUnhealthy
	}
	db, err := ledger.Open(ctx, cfg.Database)
	if err != nil {
		fmt.Fprintln(stderr, "stet:", err)
		return nil, exitUnhealthy
	}
	if err := checkSchema(ctx, db); err != nil {
		db.Close()
		fmt.Fprintln(stderr, "stet:", err)
		return nil, exitUnhealthy
	}
	if cfg.Encryption.KeysComplete() {
		if err := useEncryption(ctx, db, cfg, nil, false); err != nil {
			db.Close()
			fmt.Fprintln(stderr, "stet:", err)
			return nil, exitUnhealthy
		}
	}
	return db, exitOK
}

// ledgerExists reports whether an embedded ledger file exists, so that an
// operator command on a mistyped path says so instead of creating an empty
// ledger there.
func ledgerExists(database string, stderr io.Writer) bool {
	path, ok := strings.CutPrefix(database, "sqlite://")
	if !ok {
		return true
	}
	path = strings.SplitN(path, "?", 2)[0]
	if _, err := os.Stat(path); err != nil {
		fmt.Fprintf(stderr, "stet: no ledger at %s; run 'stet migrate' or 'stet serve' first\n", path)
		return false
	}
	return true
}

// openOperatorApp opens the app of an operator command (no API, nothing
// started) on an existing ledger; name prefixes its error.
func openOperatorApp(ctx context.Context, cfgPath, name string, stderr io.Writer) (*app, *config.Config, int) {
	cfg, ok := loadOperatorConfig(cfgPath, stderr)
	if !ok {
		return nil, nil, exitUsage
	}
	if !ledgerExists(cfg.Database, stderr) {
		return nil, nil, exitUnhealthy
	}
	a, err := openApp(ctx, cfg, appOptions{})
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return nil, nil, exitUnhealthy
	}
	return a, cfg, exitOK
}

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func checkSchema(ctx context.Context, db *ledger.DB) error { return db.CheckSchema(ctx) }
