package app

import (
	"github.com/stetlabs/stet/config"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/outbound"
)

// Destinations are the config's outbound webhooks, the alert webhook
// included, as the pipeline takes them.
func Destinations(cfg *config.Config) []outbound.Destination {
	var out []outbound.Destination
	for _, s := range cfg.Sources {
		for _, d := range s.Destinations {
			out = append(out, outbound.Destination{SourceID: s.ID, ID: d.ID, URL: d.URL, Secret: d.Secret,
				Events: d.Events, MaxAge: d.MaxAge.Std()})
		}
	}
	if w := cfg.Alerts.Webhook; w.URL != "" {
		out = append(out, outbound.Destination{SourceID: ledger.AlertSource, ID: ledger.AlertDestination, URL: w.URL,
			Secret: w.Secret, MaxAge: config.DefaultMaxAge.Std()})
	}
	return out
}
