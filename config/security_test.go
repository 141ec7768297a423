package config

import (
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
