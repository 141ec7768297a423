package web

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger"
)

// OIDCConfig is the single sign-on provider: authorization code with PKCE
// (S256); the ID token's TenantClaim and RoleClaim give the session's
// tenant and role, and its subject is the audit actor.
type OIDCConfig struct {
	Issuer       string
	ClientID     string
	ClientSecret string // optional: a public client relies on PKCE alone
	RedirectURL  string // https://HOST/ui/oidc/callback
	TenantClaim  string
	RoleClaim    string
	// HTTPClient talks to the provider; default http.DefaultClient.
	HTTPClient *http.Client
}

type oidcClient struct {
	oauth    *oauth2.Config
	verifier *oidc.IDTokenVerifier
}

const oidcCookie = "stet_oidc" // state, nonce and PKCE verifier of one sign-in

func (u *UI) oidcContext(ctx context.Context) context.Context {
	if c := u.cfg.OIDC.HTTPClient; c != nil {
		return oidc.ClientContext(ctx, c)
	}
	return ctx
}

// provider discovers the provider on first use, so that a provider that is
// down does not stop the API from starting; a failed discovery is retried
// on the next sign-in.
func (u *UI) provider(ctx context.Context) (*oidcClient, error) {
	u.oidcMu.Lock()
	defer u.oidcMu.Unlock()
	if u.oidc != nil {
		return u.oidc, nil
	}
	c := u.cfg.OIDC
	dctx, cancel := context.WithTimeout(u.oidcContext(ctx), 10*time.Second)
	defer cancel()
	p, err := oidc.NewProvider(dctx, c.Issuer)
	if err != nil {
		return nil, fmt.Errorf("oidc discovery: %w", err)
	}
	u.oidc = &oidcClient{
		oauth: &oauth2.Config{ClientID: c.ClientID, ClientSecret: c.ClientSecret, RedirectURL: c.RedirectURL,
			Endpoint: p.Endpoint(), Scopes: []string{oidc.ScopeOpenID}},
		verifier: p.Verifier(&oidc.Config{ClientID: c.ClientID, Now: u.clock.Now}),
	}
	return u.oidc, nil
}

func (u *UI) oidcStart(w http.ResponseWriter, r *http.Request) {
	if u.cfg.OIDC == nil {
		u.errorPage(w, r, nil, http.StatusNotFound, "Not found", "Single sign-on is not configured.")
		return
	}
	p, err := u.provider(r.Context())
	if err != nil {
		u.log.Warn("oidc provider unavailable", "err", err)
		u.errorPage(w, r, nil, http.StatusBadGateway, "Sign-on unavailable", "The sign-on provider cannot be reached. Try again, or sign in with a token.")
		return
	}
	state, nonce, verifier := randomToken(), randomToken(), oauth2.GenerateVerifier()
	// SameSite=Lax: the provider's redirect back is a cross-site navigation.
	http.SetCookie(w, &http.Cookie{Name: oidcCookie, Value: state + "." + nonce + "." + verifier, Path: "/ui/oidc/",
		MaxAge: 600, HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: u.secure(r)})
	http.Redirect(w, r, p.oauth.AuthCodeURL(state, oidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier)), http.StatusFound)
}

func (u *UI) oidcCallback(w http.ResponseWriter, r *http.Request) {
	if u.cfg.OIDC == nil {
		u.errorPage(w, r, nil, http.StatusNotFound, "Not found", "Single sign-on is not configured.")
		return
	}
	refuse := func(msg string) {
		u.errorPage(w, r, nil, http.StatusUnauthorized, "Sign-on refused", msg)
	}
	c, err := r.Cookie(oidcCookie)
	u.clearCookie(w, r, oidcCookie, "/ui/oidc/")
	parts := []string{}
	if err == nil {
		parts = strings.Split(c.Value, ".")
	}
	q := r.URL.Query()
	if len(parts) != 3 || subtle.ConstantTimeCompare([]byte(parts[0]), []byte(q.Get("state"))) != 1 {
		refuse("The sign-on response does not match a sign-in started here. Start again.")
		return
	}
	if q.Get("error") != "" || q.Get("code") == "" {
		refuse("The provider did not sign you in.")
		return
	}
	p, err := u.provider(r.Context())
	if err != nil {
		u.log.Warn("oidc provider unavailable", "err", err)
		u.errorPage(w, r, nil, http.StatusBadGateway, "Sign-on unavailable", "The sign-on provider cannot be reached.")
		return
	}
	ctx, cancel := context.WithTimeout(u.oidcContext(r.Context()), 15*time.Second)
	defer cancel()
	tok, err := p.oauth.Exchange(ctx, q.Get("code"), oauth2.VerifierOption(parts[2]))
	if err != nil {
		u.log.Warn("oidc code exchange", "err", err)
		refuse("The provider refused the sign-in code.")
		return
	}
	raw, _ := tok.Extra("id_token").(string)
	idt, err := p.verifier.Verify(ctx, raw)
	if err != nil || subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(parts[1])) != 1 {
		u.log.Warn("oidc id token refused", "err", err)
		refuse("The provider's ID token is not valid.")
		return
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		refuse("The provider's ID token is not valid.")
		return
	}
	tenant, _ := claims[u.cfg.OIDC.TenantClaim].(string)
	role, _ := claims[u.cfg.OIDC.RoleClaim].(string)
	if tenant == "" || !u.api.KnownTenant(tenant) || !slices.Contains(stet.Roles, stet.Role(role)) || idt.Subject == "" {
		refuse("Your account has no stet tenant and role. Ask an administrator.")
		return
	}
	err = u.startSession(w, r, ledger.WebSession{Tenant: tenant, Role: stet.Role(role), Actor: "oidc:" + idt.Subject, OIDCSubject: idt.Subject})
	if err != nil {
		u.fail(w, r, nil, err)
		return
	}
	// A page rather than a redirect: the session cookie is SameSite=Strict,
	// and a browser does not send it on a redirect chain that began at the
	// provider. The page's own navigation starts here.
	u.render(w, http.StatusOK, "signedin", view{Title: "Signed in"})
}
