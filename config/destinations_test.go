package config

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const destBlock = `    destinations:
      - {id: moderation-tool, url: URL, secret_env: STET_DEST_SECRET, events: [record.committed, record.decided], max_age: 24h}
`

func destEnv() map[string]string {
	env := testEnv()
	env["STET_DEST_SECRET"] = testSecret
	env["STET_ALERT_SECRET"] = testSecret
	return env
}

func withDestination(t *testing.T, url, extra string) string {
	t.Helper()
	yaml := readExample(t)
	anchor := "    mode: sync                              # sync | batch\n"
	if !strings.Contains(yaml, anchor) {
		t.Fatal("the example has no source mode line")
	}
	return strings.Replace(yaml, anchor, anchor+strings.Replace(destBlock, "URL", url, 1)+extra, 1) +
		"alerts:\n  webhook: {url: https://alerts.example.org/stet, secret_env: STET_ALERT_SECRET}\n"
}

func TestLoadDestinations(t *testing.T) {
	t.Parallel()
	dir := writeConfig(t, withDestination(t, "https://mod.example.org/hooks/stet", ""))
	c, err := Load(filepath.Join(dir, "stet.yaml"), lookup(destEnv()))
	if err != nil {
		t.Fatalf("Load = %v", err)
	}
	d := c.Sources[0].Destinations[0]
	if d.ID != "moderation-tool" || d.Secret != testSecret || d.MaxAge.Std() != 24*time.Hour ||
		!slices.Equal(d.Events, []string{"record.committed", "record.decided"}) {
		t.Errorf("destination = %+v", d)
	}
	if c.Alerts.Webhook.URL != "https://alerts.example.org/stet" || c.Alerts.Webhook.Secret != testSecret {
		t.Errorf("alerts.webhook = %+v", c.Alerts.Webhook)
	}
}

func TestLoadDestinationProblems(t *testing.T) {
	t.Parallel()
	const p = "sources[0].destinations[0]"
	tests := []struct {
		name, url, yamlEdit, wantPath, wantReason string
	}{
		{name: "http off loopback", url: "http://mod.example.org/hooks", wantPath: p + ".url", wantReason: "must use https"},
		{name: "not a url", url: "mod.example.org/hooks", wantPath: p + ".url", wantReason: "absolute https://"},
		{name: "unknown event", url: "https://mod.example.org/h", yamlEdit: "events: [record.committed, record.decided]|events: [record.created]", wantPath: p + ".events[0]", wantReason: "must be one of"},
		{name: "zero max_age", url: "https://mod.example.org/h", yamlEdit: "max_age: 24h|max_age: 0s", wantPath: p + ".max_age", wantReason: "greater than 0"},
		{name: "unknown key", url: "https://mod.example.org/h", yamlEdit: "max_age: 24h|max_age: 24h, retries: 3", wantPath: p + ".retries", wantReason: "unknown key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			yaml := withDestination(t, tt.url, "")
			if old, new, ok := strings.Cut(tt.yamlEdit, "|"); ok {
				yaml = strings.Replace(yaml, old, new, 1)
			}
			probs := problems(t, yaml, destEnv(), nil)
			i := slices.IndexFunc(probs, func(pr Problem) bool { return pr.Path == tt.wantPath })
			if i < 0 {
				t.Fatalf("Load problems = %v, want one at %s", probs, tt.wantPath)
			}
			if !strings.Contains(probs[i].Reason, tt.wantReason) {
				t.Errorf("problem at %s = %q, want %q", tt.wantPath, probs[i].Reason, tt.wantReason)
			}
		})
	}
	// Loopback may use http.
	dir := writeConfig(t, withDestination(t, "http://127.0.0.1:9999/hooks", ""))
	if _, err := Load(filepath.Join(dir, "stet.yaml"), lookup(destEnv())); err != nil {
		t.Errorf("Load with an http loopback destination = %v, want nil", err)
	}
}
