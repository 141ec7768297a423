package config

import (
	"path/filepath"
	"strings"
	"testing"
)

// Transport and secret strength: each is a config error naming the key.
func TestLoadRejectsWeakTransportAndSecrets(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		old, new string
		env      map[string]string
		wantPath string
	}{
		{name: "http base_url off loopback", old: "base_url: https://api.openai.com/v1", new: "base_url: http://api.openai.com/v1", wantPath: "processors[1].base_url"},
		{name: "postgres off loopback without verify", old: "database: sqlite://stet-data/stet.db", new: "database: postgres://stet@db.example.org:5432/stet?sslmode=require", wantPath: "database"},
		{name: "postgres off loopback, no sslmode", old: "database: sqlite://stet-data/stet.db", new: "database: postgres://stet@db.example.org:5432/stet", wantPath: "database"},
		{name: "short token", env: map[string]string{"STET_DEMO_TOKEN": "short-token"}, wantPath: "tenants[0].tokens[0].token_env"},
		{name: "short webhook secret", env: map[string]string{"STET_SOURCE_SECRET": "whsec_c2hvcnQtc2VjcmV0"}, wantPath: "sources[0].secret_env"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			yaml := readExample(t)
			if tt.old != "" {
				if !strings.Contains(yaml, tt.old) {
					t.Fatalf("the example has no %q", tt.old)
				}
				yaml = strings.Replace(yaml, tt.old, tt.new, 1)
			}
			env := testEnv()
			for k, v := range tt.env {
				env[k] = v
			}
			var paths []string
			for _, p := range problems(t, yaml, env, nil) {
				paths = append(paths, p.Path)
			}
			if !strings.Contains(strings.Join(paths, " "), tt.wantPath) {
				t.Errorf("problems at %v, want one at %s", paths, tt.wantPath)
			}
		})
	}
}

// Loopback needs neither https nor verify-full.
func TestLoadAllowsLoopbackTransport(t *testing.T) {
	t.Parallel()
	yaml := strings.Replace(readExample(t), "base_url: https://api.openai.com/v1", "base_url: http://127.0.0.1:9999/v1", 1)
	yaml = strings.Replace(yaml, "database: sqlite://stet-data/stet.db", "database: postgres://stet@localhost:5432/stet?sslmode=disable", 1)
	dir := writeConfig(t, yaml)
	if _, err := Load(dir+"/stet.yaml", lookup(testEnv())); err != nil {
		t.Errorf("Load with loopback http and postgres = %v, want ok", err)
	}
}

// Database URLs are checked as pgx reads them, not as net/url does: pgx
// reads the last of a repeated key, ssl=true is sslmode=require, and a
// ?host= list replaces the URL's host part. Each such URL reached a remote
// server without a checked certificate yet passed a first-value net/url
// check. The problem names database and the key, never the password.
func TestLoadChecksDatabaseURLAsTheDriverReadsIt(t *testing.T) {
	t.Parallel()
	const password = "hunter2-Secret"
	for _, tt := range []struct {
		name, url string
		wantWords []string // each must be in one problem at "database"
	}{
		{"repeated sslmode, the last disables TLS", "postgres://stet:" + password + "@db.example.org:5432/stet?sslmode=verify-full&sslmode=disable", []string{"sslmode", "more than once"}},
		{"ssl=true after verify-full skips the certificate check", "postgres://stet:" + password + "@db.example.org/stet?sslmode=verify-full&ssl=true", []string{"sslmode", "more than once"}},
		{"percent-encoded repeated sslmode", "postgres://stet:" + password + "@db.example.org/stet?sslmode=verify-full&%73slmode=disable", []string{"sslmode", "more than once"}},
		{"host= replaces a loopback host part", "postgres://stet:" + password + "@127.0.0.1/stet?host=db.example.org&sslmode=disable", []string{"host", "more than once"}},
		{"host= replaces a loopback host part, TLS off", "postgres://stet:" + password + "@127.0.0.1/stet?host=db.example.org&sslmode=disable", []string{"sslmode=verify-full", "without TLS"}},
		{"host= alone", "postgres://stet:" + password + "@/stet?host=db.example.org&sslmode=disable", []string{"sslmode=verify-full", "without TLS"}},
		{"a remote fallback host", "postgres://stet:" + password + "@127.0.0.1,db.example.org/stet?sslmode=disable", []string{"1 of its 2 hosts", "without TLS"}},
		{"ssl=true alone on a remote host", "postgres://stet:" + password + "@db.example.org/stet?ssl=true", []string{"without checking its certificate"}},
		{"prefer falls back to plaintext", "postgres://stet:" + password + "@db.example.org/stet?sslmode=prefer", []string{"without TLS"}},
		{"repeated dbname", "postgres://stet:" + password + "@localhost/stet?dbname=other", []string{"database", "more than once"}},
		{"not a URL pgx accepts", "postgres://stet:" + password + "@localhost/stet?sslmode=sometimes", []string{"does not accept this URL"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			yaml := strings.Replace(readExample(t), "database: sqlite://stet-data/stet.db", "database: '"+tt.url+"'", 1)
			var reasons []string
			for _, p := range problems(t, yaml, testEnv(), nil) {
				if strings.Contains(p.String(), password) {
					t.Errorf("problem %q prints the password", p)
				}
				if p.Path == "database" {
					reasons = append(reasons, p.Reason)
				}
			}
			for _, want := range tt.wantWords {
				if !strings.Contains(strings.Join(reasons, "\n"), want) {
					t.Errorf("Load(database: %s): problems at database = %q, want one saying %q", tt.name, reasons, want)
				}
			}
		})
	}
}

// What pgx reaches over a checked certificate, a Unix socket or loopback
// loads.
func TestLoadAllowsSafeDatabaseURLs(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		"postgres://stet:pw@db.example.org:5432/stet?sslmode=verify-full",
		"postgresql://stet@db.example.org/stet?sslmode=verify-ca",
		"postgres://stet@db1.example.org,db2.example.org:5433/stet?sslmode=verify-full&application_name=stet",
		"postgres://stet@127.0.0.1,[::1]:5433/stet?sslmode=disable",
		"postgres:///stet?host=db.example.org&sslmode=verify-full",
		"postgres:///stet?host=/var/run/postgresql",
		"postgres://stet@localhost/stet",
	} {
		yaml := strings.Replace(readExample(t), "database: sqlite://stet-data/stet.db", "database: '"+u+"'", 1)
		if _, err := Load(filepath.Join(writeConfig(t, yaml), "stet.yaml"), lookup(testEnv())); err != nil {
			t.Errorf("Load(database: %s) = %v, want ok", u, err)
		}
	}
}
