package main

import (
	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/web"
)

// mountUI serves the review UI under /ui/ of the API (DESIGN §12).
func mountUI(a *app, clock stet.Clock) error {
	w := a.cfg.Web
	cfg := web.Config{DB: a.db, API: a.api, Clock: clock, Logger: a.log,
		IdleTimeout: w.IdleTimeout.Std(), SessionMax: w.SessionMax.Std()}
	if o := w.OIDC; o.Enabled() {
		cfg.OIDC = &web.OIDCConfig{Issuer: o.Issuer, ClientID: o.ClientID, ClientSecret: o.ClientSecret,
			RedirectURL: o.RedirectURL, TenantClaim: o.TenantClaim, RoleClaim: o.RoleClaim}
	}
	ui, err := web.New(cfg)
	if err != nil {
		return err
	}
	a.api.MountUI(ui)
	return nil
}
