package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/stetlabs/stet/config"
	"github.com/stetlabs/stet/internal/app"
	"github.com/stetlabs/stet/ledger"
)

// The wiring every operator command shares: open the config's ledger, or
// the whole app, saying on stderr why not.

// loadConfig loads a config, printing every problem to stderr.
func loadConfig(path string, stderr io.Writer) (*config.Config, bool) {
	cfg, err := config.Load(path, os.Getenv)
	if err != nil {
		fmt.Fprintln(stderr, "stet:", err)
		return nil, false
	}
	return cfg, true
}

// loadOperatorConfig loads a config for a command that never serves or
// calls a processor: secret variables may be unset.
func loadOperatorConfig(path string, stderr io.Writer) (*config.Config, bool) {
	cfg, err := config.LoadWithoutSecrets(path, os.Getenv)
	if err != nil {
		fmt.Fprintln(stderr, "stet:", err)
		return nil, false
	}
	return cfg, true
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}

// configFlag adds the --config flag.
func configFlag(fs *flag.FlagSet) *string {
	return fs.String("config", "stet.yaml", "path of the YAML config file")
}

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
		if err := app.UseEncryption(ctx, db, cfg, nil, false); err != nil {
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
func openOperatorApp(ctx context.Context, cfgPath, name string, stderr io.Writer) (*app.App, *config.Config, int) {
	cfg, ok := loadOperatorConfig(cfgPath, stderr)
	if !ok {
		return nil, nil, exitUsage
	}
	if !ledgerExists(cfg.Database, stderr) {
		return nil, nil, exitUnhealthy
	}
	a, err := app.Open(ctx, cfg, app.Options{})
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
