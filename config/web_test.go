package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestWebDefaultsAndOIDC(t *testing.T) {
	t.Parallel()
	c, err := Load(filepath.Join(writeConfig(t, readExample(t)), "stet.yaml"), lookup(testEnv()))
	if err != nil {
		t.Fatal(err)
	}
	if c.Web.IdleTimeout.Std() != 15*time.Minute || c.Web.SessionMax.Std() != 12*time.Hour || c.Web.OIDC.Enabled() {
		t.Fatalf("web defaults = %+v, want 15m, 12h, no OIDC", c.Web)
	}
	env := testEnv()
	env["STET_OIDC_SECRET"] = "oidc-secret-value"
	yaml := readExample(t) + `
web:
  idle_timeout: 5m
  session_max: 1h
  oidc:
    issuer: https://login.example.org
    client_id: stet
    client_secret_env: STET_OIDC_SECRET
    redirect_url: https://stet.example.org/ui/oidc/callback
    tenant_claim: stet_tenant
    role_claim: stet_role
`
	c, err = Load(filepath.Join(writeConfig(t, yaml), "stet.yaml"), lookup(env))
	if err != nil {
		t.Fatal(err)
	}
	if c.Web.IdleTimeout.Std() != 5*time.Minute || !c.Web.OIDC.Enabled() || c.Web.OIDC.ClientSecret != "oidc-secret-value" || c.Web.OIDC.RoleClaim != "stet_role" {
		t.Fatalf("web = %+v, oidc %+v", c.Web, c.Web.OIDC)
	}
}

func TestWebRejects(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, web, wantPath string }{
		{"idle longer than max", "web: {idle_timeout: 2h, session_max: 1h}", "web.idle_timeout"},
		{"zero idle", "web: {idle_timeout: 0s}", "web.idle_timeout"},
		{"http issuer", "web: {oidc: {issuer: 'http://login.example.org', client_id: c, redirect_url: 'https://x.example/ui/oidc/callback', tenant_claim: t, role_claim: r}}", "web.oidc.issuer"},
		{"no role claim", "web: {oidc: {issuer: 'https://login.example.org', client_id: c, redirect_url: 'https://x.example/ui/oidc/callback', tenant_claim: t}}", "web.oidc.role_claim"},
		{"unknown key", "web: {idle: 5m}", "web.idle"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ps := problems(t, readExample(t)+"\n"+tt.web+"\n", testEnv(), nil)
			found := false
			for _, p := range ps {
				found = found || p.Path == tt.wantPath
			}
			if !found {
				t.Fatalf("problems = %v, want one at %s", ps, tt.wantPath)
			}
		})
	}
}

// web.secure: off by default, on when set, and implied by tls:, which
// cannot be combined with an explicit false.
func TestWebSecure(t *testing.T) {
	t.Parallel()
	const tls = "tls: {cert_file: cert.pem, key_file: key.pem}\n"
	for _, tt := range []struct {
		name, extra string
		want        bool
	}{
		{"default", "", false},
		{"set behind a TLS proxy", "web: {secure: true}\n", true},
		{"implied by tls", tls, true},
		{"tls and secure", tls + "web: {secure: true}\n", true},
	} {
		dir := writeConfig(t, readExample(t)+"\n"+tt.extra)
		for _, f := range []string{"cert.pem", "key.pem"} {
			if err := os.WriteFile(filepath.Join(dir, f), []byte("pem"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		c, err := Load(filepath.Join(dir, "stet.yaml"), lookup(testEnv()))
		if err != nil {
			t.Fatalf("%s: Load = %v", tt.name, err)
		}
		if c.Web.Secure != tt.want {
			t.Errorf("%s: Web.Secure = %v, want %v", tt.name, c.Web.Secure, tt.want)
		}
	}
	ps := problems(t, readExample(t)+"\n"+tls+"web: {secure: false}\n", testEnv(), map[string]string{"cert.pem": "pem", "key.pem": "pem"})
	if len(ps) != 1 || ps[0].Path != "web.secure" {
		t.Errorf("tls: with web.secure: false: problems = %v, want one at web.secure", ps)
	}
}
