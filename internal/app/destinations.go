package app

import (
	"github.com/stetlabs/stet/config"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/pipeline"
)

// Destinations are the config's outbound webhooks, the alert webhook
// included, as the pipeline takes them.
func Destinations(cfg *config.Config) []pipeline.Destination {
	var out []pipeline.Destination
	for _, s := range cfg.Sources {
		for _, d := range s.Destinations {
			out = append(out, pipeline.Destination{SourceID: s.ID, ID: d.ID, URL: d.URL, Secret: d.Secret,
				Events: d.Events, MaxAge: d.MaxAge.Std()})
		}
	}
	if w := cfg.Alerts.Webhook; w.URL != "" {
		out = append(out, pipeline.Destination{SourceID: ledger.AlertSource, ID: ledger.AlertDestination, URL: w.URL,
			Secret: w.Secret, MaxAge: config.DefaultMaxAge.Std()})
	}
	return out
}
