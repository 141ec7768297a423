package bench

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/stetlabs/stet/lab/cluster"
)

// envEncryptionKey names the benchmark's master key variable.
const envEncryptionKey = "STET_BENCH_KEY"

// addEncryption appends encryption: with one fresh random key to the
// config at cfgPath, and the key to env.
func addEncryption(cfgPath string, env map[string]string) error {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	f, err := os.OpenFile(cfgPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "encryption:\n  keys: [{id: bench, key_env: %s}]\n", envEncryptionKey)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	env[envEncryptionKey] = base64.StdEncoding.EncodeToString(key)
	return err
}

// encryptionCost runs one benchmark with and without encryption in the
// same run, each on a fresh database, alternating (plain, encrypted,
// encrypted, plain) so that warm-up and a busy machine weigh on both; each
// side's figure is its faster round. The ratio is the encrypted rate over
// the plaintext one.
func encryptionCost(ctx context.Context, name, unit, dir string, run func(dir string, encrypt bool) (int, time.Duration, string, error)) (*Result, error) {
	res := &Result{Name: name + " --encrypt", Subject: "encrypted", Unit: unit,
		Baseline: "the same benchmark without encryption, same run, best of 2 rounds"}
	for i, encrypt := range []bool{false, true, true, false} {
		n, el, settings, err := run(filepath.Join(dir, fmt.Sprintf("round-%d", i)), encrypt)
		if err != nil {
			return nil, err
		}
		switch {
		case encrypt && (res.Count == 0 || el < res.Elapsed):
			res.Count, res.Elapsed = n, el
			res.Settings = settings + "; AES-256-GCM, a data key per report; best of 2 rounds"
		case !encrypt && (res.BaselineCount == 0 || el < res.BaselineElapsed):
			res.BaselineCount, res.BaselineElapsed = n, el
		}
	}
	res.finish()
	return res, nil
}

// intakeRun is the stet half of Intake, with or without encryption.
func intakeRun(ctx context.Context, o IntakeOptions, dir string, encrypt bool) (int, time.Duration, string, error) {
	database, drop, err := cluster.ScratchSchema(ctx, o.Database)
	if err != nil {
		return 0, 0, "", err
	}
	defer drop()
	b, err := serveWithFake(ctx, o.Stet, dir, database, "api", encrypt)
	if err != nil {
		return 0, 0, "", err
	}
	defer b.stop()
	settings := dbSettings(ctx, b.app.DB()) + fmt.Sprintf("; %d HTTP clients, 20%% duplicates; workers off", o.Concurrency)
	jobs, elapsed, err := deliverAll(ctx, b.client, o.N, o.Concurrency)
	if err != nil {
		return 0, 0, "", err
	}
	if want := o.N - o.N/5; len(jobs) != want {
		return 0, 0, "", fmt.Errorf("accepted %d deliveries, want %d", len(jobs), want)
	}
	return o.N, elapsed, settings, nil
}

// pipelineRun is the stet half of Pipeline, with or without encryption.
func pipelineRun(ctx context.Context, o PipelineOptions, dir string, encrypt bool) (int, time.Duration, string, error) {
	database, drop, err := cluster.ScratchSchema(ctx, o.Database)
	if err != nil {
		return 0, 0, "", err
	}
	defer drop()
	b, err := serveWithFake(ctx, o.Stet, dir, database, "all", encrypt)
	if err != nil {
		return 0, 0, "", err
	}
	defer b.stop()
	settings := dbSettings(ctx, b.app.DB()) + "; instant fake OpenAI over loopback HTTP; 16 extract workers"
	start := time.Now()
	jobs, _, err := deliverAll(ctx, b.client, o.N, o.Concurrency)
	var end time.Time
	if err == nil {
		end, err = waitCommitted(ctx, b.app.DB(), len(jobs), 10*time.Minute)
	}
	if err != nil {
		return 0, 0, "", err
	}
	if encrypt != b.app.DB().Encrypted() {
		return 0, 0, "", fmt.Errorf("the ledger's encryption is %v, want %v", b.app.DB().Encrypted(), encrypt)
	}
	return len(jobs), end.Sub(start), settings, nil
}
