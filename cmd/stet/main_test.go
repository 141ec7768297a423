package main

// End-to-end helpers: TestMain builds the real stet binary once; the helpers
// write a config, run `stet serve` as a subprocess, deliver signed reports
// over HTTP and read the ledger with database/sql while the process may still
// be running.

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/internal/stetclient"
	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/lab/testdb"
	"github.com/stetlabs/stet/ledger"
)

// Environment variables the test configs name, and their values. TestMain
// sets them in this process too, so in-process run() calls load the same
// configs.
const (
	envSourceSecret = "STET_E2E_SOURCE_SECRET"
	envToken        = "STET_E2E_TOKEN"
	envOpenAIKey    = "STET_E2E_OPENAI_KEY"

	testToken     = "stet-e2e-operator-token-0123456789"
	testOpenAIKey = "sk-stet-e2e"
	testSource    = "community-reports"
)

var testSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("stet-e2e-source-secret-0123456789"))

// stetBin is the path of the stet binary TestMain built.
var stetBin string

// TestMain runs the tests, or, when the test binary runs as a testscript
// command (argv[0] "stet"), stet's own run.
func TestMain(m *testing.M) {
	testscript.Main(e2eMain{m}, map[string]func(){
		"stet": func() { os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr)) },
	})
}

// e2eMain sets up the package's tests: the test secrets in this process and
// the stet binary, built once.
type e2eMain struct{ m *testing.M }

func (e e2eMain) Run() int {
	for k, v := range map[string]string{envSourceSecret: testSecret, envToken: testToken, envOpenAIKey: testOpenAIKey,
		envKeyK1: testKeyK1, envKeyK2: testKeyK2, envKeyWrong: testKeyWrong} {
		os.Setenv(k, v)
	}
	dir, err := os.MkdirTemp("", "stet-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "stet e2e:", err)
		return 1
	}
	stetBin = filepath.Join(dir, "stet")
	build := exec.Command(goTool(), "build", "-o", stetBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "stet e2e: build the stet binary:", err)
		os.RemoveAll(dir)
		return 1
	}
	code := e.m.Run()
	os.RemoveAll(dir)
	return code
}

// goTool finds the go command that runs these tests.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "go"
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// quickstartDir is the repository's quickstart folder.
func quickstartDir() string { return filepath.Join(stettest.RepoRoot(), "examples", "quickstart") }

// sample reads one of the quickstart's sample reports.
func sample(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(quickstartDir(), "samples", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sampleText returns the text field of a sample, to check it never shows.
func sampleText(t testing.TB, name string) string {
	t.Helper()
	var r struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(sample(t, name), &r); err != nil {
		t.Fatal(err)
	}
	return r.Text
}

// freePort returns a TCP port nobody listens on right now.
func freePort(t testing.TB) int {
	t.Helper()
	port, err := stetclient.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// e2eConfig is a config written for one test: its folder holds stet.yaml,
// the SQLite ledger and the binary's stderr files.
type e2eConfig struct {
	Dir    string
	Path   string // stet.yaml
	DBPath string
	starts int // serve processes started on it, to name their stderr files
}

// writeConfig writes a config whose only processor is an openai processor
// talking to fakeURL, under a policy that permits it. Profiles are the
// quickstart's, referenced by absolute path.
func writeConfig(t testing.TB, dir, fakeURL string) *e2eConfig {
	t.Helper()
	c := &e2eConfig{Dir: dir, Path: filepath.Join(dir, "stet.yaml"), DBPath: filepath.Join(dir, "stet.db")}
	profiles := filepath.Join(quickstartDir(), "profiles")
	yaml := fmt.Sprintf(`database: %q
listen: 127.0.0.1:%d
tenants:
  - id: demo
    tokens:
      - {name: ops, role: operator, token_env: %s}
sources:
  - id: %s
    tenant: demo
    secret_env: %s
    identity: external_id
    revisions: explicit
    profile: moderation
    policy: standard
    mode: sync
profiles:
  - id: moderation
    version: 1
    schema: %q
    prompt: %q
processors:
  - id: openai-fake
    kind: openai
    base_url: %q
    api_key_env: %s
    model: gpt-test
    region: us
    retention: 30d
    timeout: 30s
policies:
  - id: standard
    processors: [openai-fake]
    minimize: [email, phone, ssn, mrn, url, ip]
    retention: {text: 30d, artifacts: 365d}
    replay_horizon: 90d
workers:
  concurrency: 2
  job_timeout: 2s
  rescue_after: 3s
`, "sqlite://"+c.DBPath, freePort(t), envToken, testSource, envSourceSecret,
		filepath.Join(profiles, "moderation.schema.json"), filepath.Join(profiles, "moderation.prompt.tmpl"),
		fakeURL, envOpenAIKey)
	if err := os.WriteFile(c.Path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return c
}

// stetProc is one `stet serve` subprocess, owned by its test.
type stetProc struct {
	cmd    *exec.Cmd
	base   string // http://127.0.0.1:PORT
	stderr string // path of the file its stderr goes to
	done   chan struct{}
	state  *os.ProcessState // set when done is closed
}

// startStet starts `stet serve --config cfg` with env added to a clean
// environment (no STET_ variable of the test process's own), waits until
// /readyz answers 200, and kills the process when the test ends. Its stderr
// goes to a file in cfg.Dir, whose tail is logged if the test fails.
func startStet(t *testing.T, cfg *e2eConfig, env map[string]string) *stetProc {
	t.Helper()
	return startServe(t, cfg, "", env, 30*time.Second)
}

// startServe is startStet with `--role role` unless role is empty, waiting
// up to ready for /readyz.
func startServe(t *testing.T, cfg *e2eConfig, role string, env map[string]string, ready time.Duration) *stetProc {
	t.Helper()
	cfg.starts++
	name := fmt.Sprintf("serve-%d.stderr", cfg.starts)
	args := []string{"serve", "--config", cfg.Path}
	if role != "" {
		name = fmt.Sprintf("serve-%d-%s.stderr", cfg.starts, role)
		args = append(args, "--role", role)
	}
	p := &stetProc{stderr: filepath.Join(cfg.Dir, name), done: make(chan struct{})}
	errFile, err := os.Create(p.stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer errFile.Close() // the child holds its own descriptor
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p.base = "http://" + addr
	p.cmd = exec.Command(stetBin, append(args, "--listen", addr)...)
	p.cmd.Dir = cfg.Dir
	p.cmd.Env = childEnv(env)
	p.cmd.Stdout = errFile
	p.cmd.Stderr = errFile
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start stet serve: %v", err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.state = p.cmd.ProcessState
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("stderr of %s (tail):\n%s", filepath.Base(p.stderr), p.tail())
		}
	})
	p.waitReady(t, ready)
	return p
}

// childEnv is this process's environment without STET_ variables, plus the
// test secrets and env.
func childEnv(env map[string]string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "STET_") {
			out = append(out, kv)
		}
	}
	out = append(out, envSourceSecret+"="+testSecret, envToken+"="+testToken, envOpenAIKey+"="+testOpenAIKey)
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// exited reports whether the process has ended.
func (p *stetProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL (if the process still runs) and waits for it to end.
func (p *stetProc) kill() {
	if !p.exited() {
		_ = p.cmd.Process.Kill()
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
}

// waitExit waits for the process to end on its own and returns its state.
func (p *stetProc) waitExit(t *testing.T, limit time.Duration) *os.ProcessState {
	t.Helper()
	select {
	case <-p.done:
		return p.state
	case <-time.After(limit):
		t.Fatalf("stet serve still runs after %s, want it dead\nstderr tail:\n%s", limit, p.tail())
		return nil
	}
}

// tail returns the last few kilobytes of the process's stderr.
func (p *stetProc) tail() string {
	b, err := os.ReadFile(p.stderr)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	if len(b) > 6000 {
		b = b[len(b)-6000:]
	}
	return string(b)
}

var httpClient = &http.Client{Timeout: 30 * time.Second}

// waitReady polls /readyz until it answers 200. It fails the test if the
// process exits first.
func (p *stetProc) waitReady(t *testing.T, limit time.Duration) {
	t.Helper()
	c := &stetclient.Client{Base: p.base, HTTP: httpClient}
	err := c.WaitReady(context.Background(), limit, func() error {
		if p.exited() {
			return fmt.Errorf("stet serve exited before it was ready (%v)", p.state)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%v\nstderr tail:\n%s", err, p.tail())
	}
}

// killedBySIGKILL reports whether a process state says SIGKILL ended it.
func killedBySIGKILL(st *os.ProcessState) bool {
	if st == nil {
		return false
	}
	ws, ok := st.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// postReport posts one signed delivery of body to the test source. A transport
// error (the process died before answering) is returned, not fatal.
func postReport(base, webhookID string, body []byte) (int, api.IntakeResponse, error) {
	c := &stetclient.Client{Base: base, Secret: testSecret, HTTP: httpClient}
	a, err := c.Deliver(context.Background(), testSource, webhookID, body)
	return a.Status, a.Intake, err
}

// openLedgerRO opens a ledger file for reading beside a running stet: no
// statement may write, and a busy writer is waited for.
func openLedgerRO(t testing.TB, path string) *sql.DB {
	t.Helper()
	if !fileExists(path) {
		t.Fatalf("ledger %s does not exist", path)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=query_only(1)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// openLedgerRW opens a ledger file to tamper with it (invariant tests).
func openLedgerRW(t testing.TB, path string) *sql.DB {
	t.Helper()
	if !fileExists(path) {
		t.Fatalf("ledger %s does not exist", path)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// count runs a SELECT COUNT(*) (or any one-integer query).
func count(t testing.TB, db *sql.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// waitFor polls cond every 100 ms until it holds. It fails the test after
// limit, or as soon as p (if not nil) exits.
func waitFor(t *testing.T, limit time.Duration, what string, p *stetProc, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		if cond() {
			return
		}
		if p != nil && p.exited() {
			t.Fatalf("waiting for %s: stet serve exited (%v)\nstderr tail:\n%s", what, p.state, p.tail())
		}
		if time.Now().After(deadline) {
			msg := ""
			if p != nil {
				msg = "\nstderr tail:\n" + p.tail()
			}
			t.Fatalf("timed out after %s waiting for %s%s", limit, what, msg)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// runBinary runs the stet binary with args and returns its exit code,
// stdout and stderr.
func runBinary(t *testing.T, dir string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, stetBin, args...)
	cmd.Dir = dir
	cmd.Env = childEnv(nil)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &ee) && ee.Exited():
		return ee.ExitCode(), stdout.String(), stderr.String()
	default:
		t.Fatalf("stet %s: %v\nstderr:\n%s", strings.Join(args, " "), err, stderr.String())
		return -1, "", ""
	}
}

// runInProcess calls run with args and returns the exit code, stdout and
// stderr.
func runInProcess(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// rewriteConfig applies edit to cfg's YAML and, for PostgreSQL, points it
// at a fresh schema (the test is skipped without STET_TEST_DATABASE_URL).
// It returns a connection to that schema; nil on SQLite, whose file stet
// creates (openLedgerRO once it has).
func rewriteConfig(t *testing.T, cfg *e2eConfig, dialect ledger.Dialect, edit func(y string) string) *sql.DB {
	t.Helper()
	b, err := os.ReadFile(cfg.Path)
	if err != nil {
		t.Fatal(err)
	}
	y := edit(string(b))
	var db *sql.DB
	if dialect == ledger.Postgres {
		url := testdb.URL(t, ledger.Postgres)
		y = strings.Replace(y, fmt.Sprintf("database: %q", "sqlite://"+cfg.DBPath), fmt.Sprintf("database: %q", url), 1)
		if db, err = sql.Open("pgx", url); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
	}
	if err := os.WriteFile(cfg.Path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	return db
}
