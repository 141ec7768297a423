// Package cli holds what the stet and stetlab commands share: exit codes,
// loading a config, opening its ledger or app, and the commands both
// binaries run (import, eval). Flags of the other commands stay in cmd/.
package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/stetlabs/stet/config"
	"github.com/stetlabs/stet/internal/app"
	"github.com/stetlabs/stet/ledger"
)

// Exit codes.
const (
	ExitOK        = 0
	ExitFailure   = 1 // the command ran and found a problem (a violation, a failed drill)
	ExitUsage     = 2 // bad flags or an invalid config: nothing was started
	ExitUnhealthy = 3 // stet could not start: the database is unreachable or unmigrated, or the listener failed
)

// Main runs a command's run with its arguments, stopping it on SIGINT or
// SIGTERM, and exits with run's code: the main of both binaries.
func Main(run func(ctx context.Context, args []string, stdout, stderr io.Writer) int) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// The wiring every operator command shares: open the config's ledger, or
// the whole app, saying on stderr why not.

// LoadConfig loads a config, printing every problem to stderr.
func LoadConfig(path string, stderr io.Writer) (*config.Config, bool) {
	cfg, err := config.Load(path, os.Getenv)
	if err != nil {
		fmt.Fprintln(stderr, "stet:", err)
		return nil, false
	}
	return cfg, true
}

// LoadOperatorConfig loads a config for a command that never serves or
// calls a processor: secret variables may be unset.
func LoadOperatorConfig(path string, stderr io.Writer) (*config.Config, bool) {
	cfg, err := config.LoadWithoutSecrets(path, os.Getenv)
	if err != nil {
		fmt.Fprintln(stderr, "stet:", err)
		return nil, false
	}
	return cfg, true
}

// NewLogger returns a JSON logger to w at level (info when it does not
// parse).
func NewLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}

// ConfigFlag adds the --config flag.
func ConfigFlag(fs *flag.FlagSet) *string {
	return fs.String("config", "stet.yaml", "path of the YAML config file")
}

// OpenLedger opens the config's ledger for a read or operate command.
func OpenLedger(ctx context.Context, cfgPath string, stderr io.Writer) (*ledger.DB, int) {
	cfg, ok := LoadOperatorConfig(cfgPath, stderr)
	if !ok {
		return nil, ExitUsage
	}
	if !LedgerExists(cfg.Database, stderr) {
		return nil, ExitUnhealthy
	}
	db, err := ledger.Open(ctx, cfg.Database)
	if err != nil {
		fmt.Fprintln(stderr, "stet:", err)
		return nil, ExitUnhealthy
	}
	if err := db.CheckSchema(ctx); err != nil {
		db.Close()
		fmt.Fprintln(stderr, "stet:", err)
		return nil, ExitUnhealthy
	}
	if cfg.Encryption.KeysComplete() {
		if err := app.UseEncryption(ctx, db, cfg, nil, false); err != nil {
			db.Close()
			fmt.Fprintln(stderr, "stet:", err)
			return nil, ExitUnhealthy
		}
	}
	return db, ExitOK
}

// LedgerExists reports whether an embedded ledger file exists, so that an
// operator command on a mistyped path says so instead of creating an empty
// ledger there.
func LedgerExists(database string, stderr io.Writer) bool {
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

// OpenOperatorApp opens the app of an operator command (no API, nothing
// started) on an existing ledger; name prefixes its error.
func OpenOperatorApp(ctx context.Context, cfgPath, name string, stderr io.Writer) (*app.App, *config.Config, int) {
	cfg, ok := LoadOperatorConfig(cfgPath, stderr)
	if !ok {
		return nil, nil, ExitUsage
	}
	if !LedgerExists(cfg.Database, stderr) {
		return nil, nil, ExitUnhealthy
	}
	a, err := app.Open(ctx, cfg, app.Options{})
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return nil, nil, ExitUnhealthy
	}
	return a, cfg, ExitOK
}

// WriteJSON prints v as indented JSON.
func WriteJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// ParseInterspersed parses args with fs, flags before, between or after
// the positional arguments (stet deletions confirm ID COPY --evidence T),
// and returns the positional ones in their order. "--" ends the flags.
func ParseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
