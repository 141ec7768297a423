package main

import (
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// Transcribers on the real binary (docs/design.md §19, their boundary):
// a policy that says audio: allow lists them, and discovery shows each
// with its kind, role, region, retention and pending answers, beside the
// policy's audio word and audio retention; a text-only source's policy
// shows none. A config that lists transcribers without audio: allow, puts
// a transcriber kind under processors, reuses a processor's ID or lets a
// transcriber's region outside the policy's regions exits 2 naming the
// key; a text-only policy's hash does not move when transcribers are
// declared beside it.
func TestTranscribersDeclared(t *testing.T) {
	t.Parallel()
	fake := openaifake.New(openaifake.Options{APIKey: testOpenAIKey})
	t.Cleanup(fake.Close)
	cfg := writeConfig(t, t.TempDir(), fake.URL())
	base, err := os.ReadFile(cfg.Path)
	if err != nil {
		t.Fatal(err)
	}
	transcribers := `transcribers:
  - id: local-audio
    kind: pocketsphinx
    region: local
    retention: none
  - id: cloud-audio
    kind: openai-transcribe
    base_url: ` + fake.URL() + `
    api_key_env: ` + envOpenAIKey + `
    region: us
    retention: pending
`
	write := func(y string) {
		t.Helper()
		if err := os.WriteFile(cfg.Path, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	edit := func(y, old, new string) string {
		t.Helper()
		if !strings.Contains(y, old) {
			t.Fatalf("config lacks %q", old)
		}
		return strings.Replace(y, old, new, 1)
	}
	audioPolicy := "    processors: [openai-fake]\n    transcribers: [local-audio, cloud-audio]\n    audio: allow\n"
	good := edit(string(base), "    processors: [openai-fake]\n", audioPolicy+"    retention: {audio: 24h}\n")
	good = edit(good, "    retention: {text: 30d, artifacts: 365d}\n", "")
	good += transcribers

	for _, bad := range []struct{ name, yaml, key string }{
		{"transcribers without audio: allow", strings.Replace(good, "    audio: allow\n", "", 1), "policies[0].audio"},
		{"a transcriber kind under processors", strings.Replace(good, "    kind: openai\n", "    kind: pocketsphinx\n", 1), "processors[0].kind"},
		{"a processor's ID", strings.Replace(good, "  - id: cloud-audio\n", "  - id: openai-fake\n", 1), "transcribers[1].id"},
		{"a region outside the policy's", strings.Replace(good, audioPolicy, audioPolicy+"    regions: [local]\n", 1), "policies[0].transcribers[1]"},
		{"audio: allow and no transcriber", strings.Replace(good, "    transcribers: [local-audio, cloud-audio]\n", "", 1), "policies[0].transcribers"},
	} {
		write(bad.yaml)
		if code, _, stderr := runInProcess(t, "migrate", "--config", cfg.Path); code != exitUsage || !strings.Contains(stderr, bad.key+": ") {
			t.Errorf("%s: stet migrate = %d\n%s\nwant %d naming %s", bad.name, code, stderr, exitUsage, bad.key)
		}
	}

	// The text-only policy's hash, before any transcriber is declared.
	write(string(base))
	textOnly := discover(t, cfg, "text only")
	write(string(base) + transcribers)
	if d := discover(t, cfg, "transcribers declared beside"); d.Sources[0].Policy.Hash != textOnly.Sources[0].Policy.Hash ||
		len(d.Sources[0].Transcribers) != 0 || d.Sources[0].Policy.Audio != "deny" || d.Sources[0].Policy.Retention.Audio != "0s" {
		t.Errorf("text-only policy with transcribers declared: hash %s (was %s), transcribers %+v, audio %q, audio retention %q; want the same hash, none, deny, 0s",
			d.Sources[0].Policy.Hash, textOnly.Sources[0].Policy.Hash, d.Sources[0].Transcribers, d.Sources[0].Policy.Audio, d.Sources[0].Policy.Retention.Audio)
	}

	write(good)
	d := discover(t, cfg, "audio allowed")
	src := d.Sources[0]
	if src.Policy.Audio != "allow" || src.Policy.Retention.Audio != "1d" || src.Policy.Hash == textOnly.Sources[0].Policy.Hash {
		t.Errorf("policy = %+v, want audio allow, audio retention 1d, a new hash", src.Policy)
	}
	if len(src.Transcribers) != 2 {
		t.Fatalf("transcribers = %+v, want local-audio and cloud-audio", src.Transcribers)
	}
	local, cloud := src.Transcribers[0], src.Transcribers[1]
	if local.ID != "local-audio" || local.Kind != "pocketsphinx" || local.Role != "primary" || local.Region != "local" || local.Retention != "none" || len(local.Pending) != 0 {
		t.Errorf("transcribers[0] = %+v, want local-audio, pocketsphinx, primary, local, none", local)
	}
	if cloud.ID != "cloud-audio" || cloud.Kind != "openai-transcribe" || cloud.Role != "fallback" || cloud.Region != "us" || !slices.Equal(cloud.Pending, []string{"retention"}) {
		t.Errorf("transcribers[1] = %+v, want cloud-audio, openai-transcribe, fallback, us, pending [retention]", cloud)
	}
	if len(src.Processors) != 1 || src.Processors[0].ID != "openai-fake" {
		t.Errorf("processors = %+v, want openai-fake alone: a transcriber never receives text", src.Processors)
	}
}

// discover starts stet on cfg, reads GET /v1/discovery and stops it.
func discover(t *testing.T, cfg *e2eConfig, what string) api.Discovery {
	t.Helper()
	p := startStet(t, cfg, nil)
	defer p.kill()
	req, _ := http.NewRequest(http.MethodGet, p.base+"/v1/discovery", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	defer resp.Body.Close()
	var d api.Discovery
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&d) != nil || len(d.Sources) != 1 {
		t.Fatalf("%s: GET /v1/discovery = %d, want 200 with one source", what, resp.StatusCode)
	}
	return d
}
