package web_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/golang-jwt/jwt/v5"
	"github.com/oauth2-proxy/mockoidc"

	"github.com/stetlabs/stet/web"
)

// oidcUser is a provider account carrying stet's tenant and role claims.
type oidcUser struct{ sub, tenant, role string }

func (u oidcUser) ID() string                        { return u.sub }
func (u oidcUser) Userinfo([]string) ([]byte, error) { return []byte(`{"sub":"` + u.sub + `"}`), nil }
func (u oidcUser) Claims(_ []string, c *mockoidc.IDTokenClaims) (jwt.Claims, error) {
	return struct {
		*mockoidc.IDTokenClaims
		Tenant string `json:"stet_tenant"`
		Role   string `json:"stet_role"`
	}{c, u.tenant, u.role}, nil
}

func startProvider(t *testing.T) *mockoidc.MockOIDC {
	t.Helper()
	m, err := mockoidc.Run() // on 127.0.0.1: never a network provider
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown() })
	return m
}

// OIDC end to end: authorization code with PKCE against a local provider;
// the session's tenant and role come from the claims, the subject is the
// audit actor, and nothing but the subject is stored.
func TestBrowserOIDCLogin(t *testing.T) {
	m := startProvider(t)
	cfg := &web.OIDCConfig{Issuer: m.Issuer(), ClientID: m.ClientID, ClientSecret: m.ClientSecret,
		TenantClaim: "stet_tenant", RoleClaim: "stet_role"}
	e := newEnv(t, envOptions{oidc: cfg})
	// The callback's address is known once the server listens.
	cfg.RedirectURL = e.Server.URL + "/ui/oidc/callback"
	e.Restart(e.Policy) // rebuild the UI with it
	harass, _, _ := e.seed(t)
	ctx := browser(t, 1280)
	base := e.Server.URL

	m.QueueUser(oidcUser{sub: "alice-7f3a", tenant: "demo", role: "reviewer"})
	do(t, ctx, chromedp.Navigate(base+"/ui/login"), chromedp.WaitVisible(chromedp.CSS(`a[href="/ui/oidc/start"]`)),
		chromedp.Click(chromedp.CSS(`a[href="/ui/oidc/start"]`)), chromedp.WaitVisible(chromedp.CSS("table.queue")))
	if got := text(t, ctx, ".ident"); got != "demo · reviewer · oidc:alice-7f3a" {
		t.Fatalf("signed in as %q", got)
	}
	if n := e.Count("web_sessions", "oidc_subject = 'alice-7f3a' AND token_hash IS NULL AND tenant_id = 'demo'"); n != 1 {
		t.Fatalf("OIDC sessions = %d, want 1 holding the subject only", n)
	}
	do(t, ctx, chromedp.Navigate(base+"/ui/review/"+harass), chromedp.WaitVisible(chromedp.CSS("form#decision")),
		chromedp.Click(chromedp.CSS(`button[data-key="r"]`)), chromedp.WaitVisible(chromedp.CSS("p.flash")))
	if rec := e.apiRecord(t, harass); rec.DecidedBy != "oidc:alice-7f3a" || *rec.Decision != "reject" {
		t.Fatalf("decided by %q (%v), want oidc:alice-7f3a reject", rec.DecidedBy, rec.Decision)
	}

	// An account without a known tenant is refused, and gets no session.
	m.QueueUser(oidcUser{sub: "mallory", tenant: "nosuch", role: "operator"})
	do(t, ctx, chromedp.Navigate(base+"/ui/oidc/start"), chromedp.WaitVisible(chromedp.CSS("section.errorpage")))
	if got := text(t, ctx, "#err-h"); !strings.Contains(got, "401") {
		t.Fatalf("unknown tenant: %q, want a 401 refusal", got)
	}
	if n := e.Count("web_sessions", "oidc_subject = 'mallory'"); n != 0 {
		t.Fatal("a session was opened for an unknown tenant")
	}
	// A callback with a state this browser did not start is refused.
	do(t, ctx, chromedp.Navigate(base+"/ui/oidc/callback?code=x&state=forged"), chromedp.WaitVisible(chromedp.CSS("section.errorpage")))
	if got := text(t, ctx, "#err-h"); !strings.Contains(got, "401") {
		t.Fatalf("forged state: %q, want 401", got)
	}
}
