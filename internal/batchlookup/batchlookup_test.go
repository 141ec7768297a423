package batchlookup

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/config"
)

// The text printout leads with the provider's batch ID (the ID
// `stet batch reconcile --adopt` takes); --json indents the provider's
// answer as stet's other --json output is, and passes a body that is not
// JSON through as it came.
func TestWriteText(t *testing.T) {
	t.Parallel()
	st := &stet.BatchStatus{ProviderID: "batch_abc", ProviderState: "in_progress", State: stet.BatchInProgress,
		Raw: []byte(`{"id":"batch_abc","status":"in_progress"}`)}
	var b bytes.Buffer
	WriteText(&b, "openai-fake", st, false)
	if first, _, _ := strings.Cut(b.String(), "\n"); first != "provider batch  batch_abc" {
		t.Errorf("first line = %q, want the provider batch ID", first)
	}
	b.Reset()
	WriteText(&b, "openai-fake", st, true)
	if want := "{\n  \"id\": \"batch_abc\",\n  \"status\": \"in_progress\"\n}\n"; b.String() != want {
		t.Errorf("--json = %q, want %q", b.String(), want)
	}
	b.Reset()
	st.Raw = []byte("not json")
	WriteText(&b, "openai-fake", st, true)
	if b.String() != "not json\n" {
		t.Errorf("--json of a non-JSON body = %q", b.String())
	}
}

// Client builds the batch client of a configured processor with the key
// its variable holds, and refuses a processor the config lacks or one
// without a batch API.
func TestClient(t *testing.T) {
	t.Parallel()
	cfg := &config.Config{Processors: []config.Processor{
		{ID: "openai-fake", Kind: config.KindOpenAI, BaseURL: "http://127.0.0.1:1", APIKeyEnv: "K", Model: "gpt-test", Region: "us", Retention: "30d"},
		{ID: "local-rules", Kind: config.KindRules, Rules: "../../examples/quickstart/profiles/moderation.rules.yaml", Region: "local", Retention: "none"},
	}}
	getenv := func(k string) string {
		if k == "K" {
			return "sk-test"
		}
		return ""
	}
	if bp, err := Client(cfg, "openai-fake", getenv); err != nil || bp == nil {
		t.Errorf("Client(openai-fake) = %v, %v; want a batch client", bp, err)
	}
	if _, err := Client(cfg, "nope", getenv); err == nil || !strings.Contains(err.Error(), `no processor "nope"`) {
		t.Errorf("Client(nope) = %v, want no such processor", err)
	}
	if _, err := Client(cfg, "local-rules", getenv); err == nil || !strings.Contains(err.Error(), "has no batch API") {
		t.Errorf("Client(local-rules) = %v, want no batch API", err)
	}
}
