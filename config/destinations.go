package config

import (
	"encoding/base64"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Record events a destination may take (docs/design.md §13).
var destinationEvents = []string{"record.committed", "record.decided", "record.reopened", "record.deleted"}

// DefaultMaxAge is how long a delivery is retried before it is failed.
const DefaultMaxAge = Duration(24 * time.Hour)

// validateDestinations checks a source's destinations: ids unique in the
// source, https URLs (http only on loopback), a whsec_ secret, known
// events, a positive max_age.
func (l *loader) validateDestinations(p string, s *Source) {
	dp := join(p, "destinations")
	checkIDs(l, dp, s.Destinations, func(d *Destination) string { return d.ID })
	for i := range s.Destinations {
		d := &s.Destinations[i]
		ip := index(dp, i)
		l.checkWebhookURL(join(ip, "url"), d.URL)
		d.Secret = l.webhookSecret(join(ip, "secret_env"), d.SecretEnv)
		if !l.present(join(ip, "events")) {
			d.Events = []string{"record.committed", "record.decided", "record.reopened"}
		} else if len(d.Events) == 0 {
			l.problem(join(ip, "events"), "must name at least one of %s", strings.Join(destinationEvents, " | "))
		}
		for j, ev := range d.Events {
			if !slices.Contains(destinationEvents, ev) {
				l.problem(index(join(ip, "events"), j), "must be one of %s", strings.Join(destinationEvents, " | "))
			}
		}
		if !l.present(join(ip, "max_age")) {
			d.MaxAge = DefaultMaxAge
		} else if d.MaxAge <= 0 {
			l.problem(join(ip, "max_age"), "must be greater than 0")
		}
	}
}

// validateAlerts checks the alert webhook, when configured.
func (l *loader) validateAlerts(a *Alerts) {
	if !l.present("alerts.webhook") {
		return
	}
	l.checkWebhookURL("alerts.webhook.url", a.Webhook.URL)
	a.Webhook.Secret = l.webhookSecret("alerts.webhook.secret_env", a.Webhook.SecretEnv)
}

// checkWebhookURL requires an absolute https URL; http only on loopback
// (docs/design.md §13). The URL is never quoted: it may carry a token.
func (l *loader) checkWebhookURL(path, u string) {
	if u == "" {
		l.problem(path, "required")
		return
	}
	p, err := url.Parse(u)
	if err != nil || p.Host == "" || (p.Scheme != "http" && p.Scheme != "https") {
		l.problem(path, "must be an absolute https:// URL")
		return
	}
	if p.Scheme == "http" && !isLoopback(p.Hostname()) {
		l.problem(path, "must use https (http is allowed only on loopback)")
	}
}

// webhookSecret reads a whsec_ secret from the variable named at path.
func (l *loader) webhookSecret(path, name string) string {
	v := l.env(path, name)
	if v == "" {
		return ""
	}
	key, ok := strings.CutPrefix(v, "whsec_")
	if b, err := base64.StdEncoding.DecodeString(key); !ok || err != nil || len(b) == 0 {
		l.problem(path, "the secret in %s is not whsec_ followed by base64", name)
		return ""
	}
	return v
}
