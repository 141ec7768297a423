package app

import (
	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/web"
)

// mountUI serves the review UI under /ui/ of the API (docs/design.md §12).
func mountUI(a *App, clock stet.Clock) error {
	w := a.Config.Web
	cfg := web.Config{DB: a.DB, API: a.API, Clock: clock, Logger: a.Log,
		IdleTimeout: w.IdleTimeout.Std(), SessionMax: w.SessionMax.Std(), Secure: w.Secure || a.Config.TLS != nil}
	if o := w.OIDC; o.Enabled() {
		cfg.OIDC = &web.OIDCConfig{Issuer: o.Issuer, ClientID: o.ClientID, ClientSecret: o.ClientSecret,
			RedirectURL: o.RedirectURL, TenantClaim: o.TenantClaim, RoleClaim: o.RoleClaim}
	}
	ui, err := web.New(cfg)
	if err != nil {
		return err
	}
	a.API.MountUI(ui)
	return nil
}
