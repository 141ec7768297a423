// Package scripts_test runs the repository's shell scripts the way a new
// user would, on a PATH without the browser and with a fresh .cache/.
package scripts_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// checkout makes a copy of scripts/test.sh in a fresh directory laid out as
// the repository is, with no .cache/, and returns the directory.
func checkout(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	src, err := os.ReadFile("test.sh")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "scripts", "test.sh"), src, 0o755); err != nil {
		t.Fatal(err)
	}
	// Readable by an unprivileged user too (t.TempDir is 0700).
	for _, d := range []string{root, filepath.Dir(root)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// pathWithout returns a directory for PATH holding links to the named host
// tools only: no chromium, whatever the host has installed.
func pathWithout(t *testing.T, tools ...string) string {
	t.Helper()
	bin := t.TempDir()
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range tools {
		p, err := exec.LookPath(name)
		if err != nil {
			t.Fatalf("host tool %s: %v", name, err)
		}
		if err := os.Symlink(p, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	return bin
}

type run struct {
	code   int
	stderr string
}

// setup runs scripts/test.sh --setup-only in root with only bin on PATH.
func setup(t *testing.T, root, bin string, uid int, env ...string) run {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bash, filepath.Join(root, "scripts", "test.sh"), "--setup-only")
	cmd.Dir = root
	// The host's environment (npm's registry and CA settings among it), with
	// PATH replaced.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "STET_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(append(cmd.Env, "PATH="+bin), env...)
	if uid != 0 && os.Getuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return run{0, stderr.String()}
	case errors.As(err, &exit):
		return run{exit.ExitCode(), stderr.String()}
	}
	t.Fatalf("run test.sh: %v", err)
	return run{}
}

// As a user who is not root, with no Chromium on PATH, the script installs
// nothing, prints the one command to run as root and stops with status 1.
func TestSetupWithoutChromiumAsUser(t *testing.T) {
	t.Parallel()
	root := checkout(t)
	bin := pathWithout(t, "dirname", "id", "apt-get", "npm", "node", "env")
	r := setup(t, root, bin, 65534)
	if r.code != 1 {
		t.Fatalf("exit status %d, want 1; stderr:\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "Run this as root") || !strings.Contains(r.stderr, "\n  apt-get install -y --no-install-recommends chromium\n") {
		t.Fatalf("stderr does not name the command to run as root:\n%s", r.stderr)
	}
	if _, err := os.Stat(filepath.Join(root, ".cache")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf(".cache after a refused set-up: %v (want absent)", err)
	}
}

// As root on a machine without apt-get, it says what to do instead.
func TestSetupWithoutChromiumOrAptGet(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("the root branch needs root; TestSetupWithoutChromiumAsUser covers this user")
	}
	root := checkout(t)
	r := setup(t, root, pathWithout(t, "dirname", "id"), 0)
	if r.code != 1 || !strings.Contains(r.stderr, "no apt-get; install Chromium, or set STET_CHROMIUM") {
		t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
	}
}

// With a browser named by STET_CHROMIUM and no npm on PATH, the script says
// how to get npm and stops before the tests.
func TestSetupWithoutNpm(t *testing.T) {
	t.Parallel()
	root := checkout(t)
	r := setup(t, root, pathWithout(t, "dirname", "id"), 65534, "STET_CHROMIUM=/usr/bin/chromium")
	if r.code != 1 || !strings.Contains(r.stderr, "npm is not on PATH. Install npm (Debian: apt-get install -y npm)") {
		t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
	}
}

// With a fresh .cache/, the script installs axe-core 4.14.1 with npm and
// says so; the second run installs nothing and says nothing about it.
func TestSetupInstallsAxeOnce(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("npm"); err != nil {
		t.Skip("npm is not on PATH; TestSetupWithoutNpm covers this machine")
	}
	root := checkout(t)
	bin := pathWithout(t, "dirname", "id", "npm", "node", "env", "sh")
	// STET_CHROMIUM stands for a browser so that this test exercises the
	// axe-core step alone; the Chromium step has tests of its own above.
	first := setup(t, root, bin, 0, "STET_CHROMIUM=/usr/bin/chromium")
	if first.code != 0 || !strings.Contains(first.stderr, "installing axe-core@4.14.1 for the accessibility test into .cache/axe") {
		t.Fatalf("first run: exit status %d; stderr:\n%s", first.code, first.stderr)
	}
	axe, err := os.ReadFile(filepath.Join(root, ".cache", "axe", "node_modules", "axe-core", "axe.min.js"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(axe, []byte("4.14.1")) {
		t.Fatalf("installed axe.min.js does not carry version 4.14.1 (%d bytes)", len(axe))
	}
	second := setup(t, root, bin, 0, "STET_CHROMIUM=/usr/bin/chromium")
	if second.code != 0 || strings.Contains(second.stderr, "installing") {
		t.Fatalf("second run: exit status %d; stderr:\n%s", second.code, second.stderr)
	}
}
