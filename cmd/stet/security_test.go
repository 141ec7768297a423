package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// stet audit verify: 0 on an intact chain, 1 at the first broken link;
// stet inspect is audited.
func TestAuditVerifyCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeRulesConfig(t, dir, configParts{})
	if code, _, stderr := runInProcess(t, "migrate", "--config", cfg); code != exitOK {
		t.Fatalf("migrate = %d: %s", code, stderr)
	}
	for _, args := range [][]string{
		{"pause", "--config", cfg, "--scope", "tenant:demo", "--reason", "maintenance"},
		{"unpause", "--config", cfg, "--scope", "tenant:demo"},
		{"pause", "--config", cfg, "--scope", "all", "--reason", "maintenance"},
	} {
		if code, _, stderr := runInProcess(t, args...); code != exitOK {
			t.Fatalf("run(%q) = %d: %s", args, code, stderr)
		}
	}
	if code, stdout, stderr := runInProcess(t, "audit", "verify", "--config", cfg); code != exitOK || !strings.Contains(stdout, "ok: 3 chained rows intact") {
		t.Fatalf("audit verify = %d %q %q, want 0 and 3 rows intact", code, stdout, stderr)
	}
	db := openLedgerRW(t, filepath.Join(dir, "stet-data", "stet.db"))
	for _, s := range []string{`DROP TRIGGER audit_log_no_update`, `UPDATE audit_log SET actor = 'someone-else' WHERE id = 2`} {
		if _, err := db.Exec(s); err != nil {
			t.Fatal(err)
		}
	}
	if code, stdout, _ := runInProcess(t, "audit", "verify", "--config", cfg); code != exitFailure || !strings.Contains(stdout, "broken: row 2") {
		t.Errorf("audit verify after editing row 2 = %d %q, want 1 and broken at row 2", code, stdout)
	}
}

// withDatabase rewrites the database line of the config at path.
func withDatabase(t *testing.T, path, database string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const line = "database: sqlite://stet-data/stet.db"
	if !bytes.Contains(b, []byte(line)) {
		t.Fatalf("%s has no %q", path, line)
	}
	b = bytes.Replace(b, []byte(line), []byte(fmt.Sprintf("database: %q", database)), 1)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A database URL that pgx reads differently from a first-value URL parser
// (a repeated sslmode, ssl=true after verify-full, a ?host= replacing the
// host part) is refused by every command that loads the config: exit 2,
// naming database and the key, never the password, and before any
// connection: a listener at the URL's own address is never dialled.
func TestDatabaseURLRefusedBeforeAnyConnection(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var dialled atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dialled.Add(1)
			c.Close()
		}
	}()
	const password = "hunter2-Secret"
	base := "postgres://stet:" + password + "@" + ln.Addr().String() + "/stet"
	for _, tt := range []struct {
		name, url, key string
	}{
		{"repeated sslmode", base + "?sslmode=verify-full&sslmode=disable", "sslmode"},
		{"ssl=true after verify-full", base + "?sslmode=verify-full&ssl=true", "sslmode"},
		{"host= replaces the host part", base + "?host=db.example.org&sslmode=disable", "host"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cfg := writeRulesConfig(t, dir, configParts{})
			withDatabase(t, cfg, tt.url)
			check := func(cmd string, code int, stderr string) {
				t.Helper()
				if code != exitUsage {
					t.Errorf("stet %s = exit %d, want %d\nstderr: %s", cmd, code, exitUsage, stderr)
				}
				if !strings.Contains(stderr, "database: ") || !strings.Contains(stderr, tt.key) {
					t.Errorf("stet %s stderr = %q, want it to name database and %s", cmd, stderr, tt.key)
				}
				if strings.Contains(stderr, password) {
					t.Errorf("stet %s stderr prints the password: %q", cmd, stderr)
				}
			}
			code, _, stderr := runBinary(t, dir, "serve", "--config", cfg)
			check("serve", code, stderr)
			for _, args := range [][]string{
				{"migrate", "--config", cfg},
				{"check", "--config", cfg},
				{"pause", "--config", cfg},
				{"audit", "verify", "--config", cfg},
			} {
				code, _, stderr := runInProcess(t, args...)
				check(strings.Join(args[:len(args)-2], " "), code, stderr)
			}
		})
	}
	t.Cleanup(func() {
		if n := dialled.Load(); n != 0 {
			t.Errorf("the database address was dialled %d times, want never", n)
		}
	})
}

// web.secure: true, behind a proxy that ends TLS, marks the session cookie
// Secure and sends HSTS from the real binary's handler, UI and API alike;
// without it, over plain HTTP, neither. Before, web.Config.Secure was
// never set from the config (and web.secure was an unknown key).
func TestServeWebSecureBehindTLSProxy(t *testing.T) {
	t.Parallel()
	for _, secure := range []bool{true, false} {
		t.Run(fmt.Sprintf("secure=%v", secure), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := writeRulesConfig(t, dir, configParts{})
			if secure {
				appendConfig(t, path, "web: {secure: true}\n")
			}
			p := startStet(t, &e2eConfig{Dir: dir, Path: path, DBPath: filepath.Join(dir, "stet-data", "stet.db")}, nil)
			client := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

			login, session, res := uiSignIn(t, client, p.base, testToken)
			if session.Secure != secure || login.Secure != secure {
				t.Errorf("session cookie Secure = %v, login cookie Secure = %v; want %v", session.Secure, login.Secure, secure)
			}
			ready, err := client.Get(p.base + "/readyz")
			if err != nil {
				t.Fatal(err)
			}
			ready.Body.Close()
			for what, h := range map[string]http.Header{"POST /ui/login": res.Header, "GET /readyz": ready.Header} {
				if got := h.Get("Strict-Transport-Security"); strings.Contains(got, "max-age=") != secure {
					t.Errorf("%s: Strict-Transport-Security = %q, want it set %v", what, got, secure)
				}
			}
		})
	}
}

// uiSignIn signs in to the review UI at base with token, as a browser does:
// GET /ui/login for the login cookie, then the form. It returns both
// cookies and the answer to the form.
func uiSignIn(t *testing.T, client *http.Client, base, token string) (login, session *http.Cookie, res *http.Response) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	get, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/ui/login", nil)
	if err != nil {
		t.Fatal(err)
	}
	page, err := client.Do(get)
	if err != nil {
		t.Fatal(err)
	}
	page.Body.Close()
	for _, c := range page.Cookies() {
		if c.Name == "stet_login" {
			login = c
		}
	}
	if login == nil {
		t.Fatalf("GET /ui/login = %d without a stet_login cookie", page.StatusCode)
	}
	form := url.Values{"login": {login.Value}, "token": {token}, "next": {"/ui/review"}}
	post, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/ui/login", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	post.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	post.AddCookie(&http.Cookie{Name: login.Name, Value: login.Value})
	res, err = client.Do(post)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	for _, c := range res.Cookies() {
		if c.Name == "stet_session" {
			session = c
		}
	}
	if session == nil {
		t.Fatalf("POST /ui/login = %d without a stet_session cookie", res.StatusCode)
	}
	return login, session, res
}
