package config

import (
	"net"
	"net/url"
	"time"
)

// Defaults of the review UI (docs/design.md §12).
const (
	DefaultWebIdleTimeout = Duration(15 * time.Minute) // HIPAA automatic logoff
	DefaultWebSessionMax  = Duration(12 * time.Hour)
)

// Web tunes the review UI's sessions and its optional single sign-on.
type Web struct {
	IdleTimeout Duration `yaml:"idle_timeout"` // a session idle this long ends; default 15m
	SessionMax  Duration `yaml:"session_max"`  // a session ends this long after login; default 12h
	// Secure says browsers reach stet over HTTPS even where this process
	// serves plain HTTP (TLS ends at a proxy in front): the session cookies
	// are Secure and every answer carries HSTS. tls: implies it.
	Secure bool `yaml:"secure"`
	OIDC   OIDC `yaml:"oidc"` // single sign-on, when present
}

// Enabled reports whether the config names a provider.
func (o *OIDC) Enabled() bool { return o.Issuer != "" }

// OIDC is the review UI's OpenID Connect provider: authorization code with
// PKCE; the tenant and role come from the ID token's claims.
type OIDC struct {
	Issuer          string `yaml:"issuer"`
	ClientID        string `yaml:"client_id"`
	ClientSecretEnv string `yaml:"client_secret_env"` // optional: a public client uses PKCE alone
	RedirectURL     string `yaml:"redirect_url"`      // https://HOST/ui/oidc/callback
	TenantClaim     string `yaml:"tenant_claim"`
	RoleClaim       string `yaml:"role_claim"`
	// ClientSecret is read from ClientSecretEnv at load.
	ClientSecret string `yaml:"-"`
}

// validateWeb checks web: and fills in its defaults; servesTLS (tls: is
// set) implies web.secure.
func (l *loader) validateWeb(w *Web, servesTLS bool) {
	if servesTLS {
		if l.present("web.secure") && !w.Secure {
			l.problem("web.secure", "must not be false when tls: is set: this process serves HTTPS itself")
		}
		w.Secure = true
	}
	duration := func(key string, v *Duration, def Duration) {
		p := join("web", key)
		if !l.present(p) {
			*v = def
		} else if *v <= 0 {
			l.problem(p, "must be greater than 0")
		}
	}
	duration("idle_timeout", &w.IdleTimeout, DefaultWebIdleTimeout)
	duration("session_max", &w.SessionMax, DefaultWebSessionMax)
	if w.IdleTimeout > 0 && w.SessionMax > 0 && w.IdleTimeout > w.SessionMax {
		l.problem("web.idle_timeout", "must not be longer than session_max (%s)", w.SessionMax)
	}
	o := &w.OIDC
	if !l.present("web.oidc") {
		return
	}
	abs := func(key, v string) {
		p := join("web.oidc", key)
		u, err := url.Parse(v)
		switch {
		case v == "":
			l.problem(p, "required")
		case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
			l.problem(p, "must be an absolute http(s) URL")
		case u.Scheme == "http" && !loopbackHost(u.Hostname()):
			l.problem(p, "must be https unless the host is loopback")
		}
	}
	abs("issuer", o.Issuer)
	abs("redirect_url", o.RedirectURL)
	for key, v := range map[string]string{"client_id": o.ClientID, "tenant_claim": o.TenantClaim, "role_claim": o.RoleClaim} {
		if v == "" {
			l.problem(join("web.oidc", key), "required")
		}
	}
	if o.ClientSecretEnv != "" {
		o.ClientSecret = l.env("web.oidc.client_secret_env", o.ClientSecretEnv)
	}
}

func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
