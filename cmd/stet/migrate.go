package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/stetlabs/stet/ledger"
)

func cmdMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := configFlag(fs)
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	cfg, ok := loadOperatorConfig(*cfgPath, stderr)
	if !ok {
		return exitUsage
	}
	db, err := ledger.Open(ctx, cfg.Database)
	if err != nil {
		fmt.Fprintln(stderr, "stet migrate:", err)
		return exitUnhealthy
	}
	defer db.Close()
	applied, err := db.Migrate(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "stet migrate:", err)
		return exitUnhealthy
	}
	if err := migrateRiver(ctx, db); err != nil {
		fmt.Fprintln(stderr, "stet migrate:", err)
		return exitUnhealthy
	}
	for _, m := range applied {
		fmt.Fprintln(stdout, "applied", m)
	}
	v, _ := db.LatestVersion()
	fmt.Fprintf(stdout, "ledger at version %d; river migrated\n", v)
	return exitOK
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
		if err := useEncryption(ctx, db, cfg, nil, false); err != nil {
			db.Close()
			fmt.Fprintln(stderr, "stet:", err)
			return nil, exitUnhealthy
		}
	}
	return db, exitOK
}

// checkSchema says whether the ledger's schema is the one this binary
// knows, and which way to go if not.
func checkSchema(ctx context.Context, db *ledger.DB) error {
	current, known, err := db.SchemaVersions(ctx)
	switch {
	case err != nil:
		return err
	case current > known:
		return fmt.Errorf("ledger schema version %d is newer than this stet knows (%d): upgrade stet", current, known)
	case current < known:
		return fmt.Errorf("ledger schema version %d is older than this stet's (%d): run 'stet migrate'", current, known)
	}
	return nil
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
