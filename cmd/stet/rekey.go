package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/stetlabs/stet/internal/backfill"
	"github.com/stetlabs/stet/internal/cli"
	"github.com/stetlabs/stet/ledger"
)

// cmdRekey rewraps every data key under the first configured key and seals
// the rows written before encryption was on (ledger.DB.Rekey). It is
// resumable: run it again after an interruption.
func cmdRekey(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rekey", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: stet rekey [flags]\n\nRewraps every report's data key under the first key of encryption.keys and seals plaintext rows\nwritten before encryption was on, in short batches; resumable. Afterwards the other keys may be removed.")
		fs.PrintDefaults()
	}
	cfgPath := cli.ConfigFlag(fs)
	batch := fs.Int("batch", 200, "rows per transaction")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 || *batch <= 0 {
		if err == nil {
			fs.Usage()
		}
		return exitUsage
	}
	cfg, ok := cli.LoadOperatorConfig(*cfgPath, stderr)
	if !ok {
		return exitUsage
	}
	if !cfg.Encryption.KeysComplete() {
		fmt.Fprintln(stderr, "stet rekey: encryption: is not configured, or a variable of encryption.keys is unset")
		return exitUsage
	}
	db, code := cli.OpenLedger(ctx, *cfgPath, stderr)
	if code != exitOK {
		return code
	}
	defer db.Close()
	total, err := db.RekeyPending(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "stet rekey:", err)
		return exitUnhealthy
	}
	var done atomic.Int64
	bar := backfill.StartBar(stderr, "rekey", total, done.Load)
	res, err := db.Rekey(ctx, ledger.RekeyParams{Batch: *batch, Actor: "cli", Now: func() time.Time { return time.Now().UTC() },
		Progress: func(n int) { done.Store(int64(n)) }})
	bar.Stop()
	if err != nil {
		fmt.Fprintln(stderr, "stet rekey:", err)
		fmt.Fprintf(stderr, "stet rekey: stopped after %d keys, %d rows sealed and %d hashes converted; run it again to resume\n", res.Rewrapped, res.Sealed, res.Blinded)
		return exitFailure
	}
	if *asJSON {
		_ = json.NewEncoder(stdout).Encode(map[string]any{"rewrapped": res.Rewrapped, "sealed": res.Sealed, "blinded": res.Blinded,
			"key_id": cfg.Encryption.Keys[0].ID})
		return exitOK
	}
	fmt.Fprintf(stdout, "rekey: %d keys rewrapped under %s, %d plaintext rows sealed, %d hashes made blind-index values\n",
		res.Rewrapped, cfg.Encryption.Keys[0].ID, res.Sealed, res.Blinded)
	return exitOK
}
