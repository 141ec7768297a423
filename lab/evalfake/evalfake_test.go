package evalfake

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

func schemaDoc(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "quickstart", "profiles", "moderation.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var doc = Doc{Text: "Use code X for 20% off, order now", Expected: map[string]json.RawMessage{
	"category": json.RawMessage(`"spam"`), "severity": json.RawMessage(`"low"`), "action": json.RawMessage(`"remove"`), "labels": json.RawMessage(`["spam"]`)}}

// ask sends one chat completion with the given turns and returns the
// message's content and refusal.
func ask(t *testing.T, f *Fake, turns ...string) (content, refusal string) {
	t.Helper()
	var msgs []map[string]string
	for i, s := range turns {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]string{"role": role, "content": s})
	}
	body, _ := json.Marshal(map[string]any{"model": "m", "messages": msgs,
		"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "moderation", "strict": true, "schema": json.RawMessage(schemaDoc(t))}}})
	resp, err := http.Post(f.URL()+"/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Choices []struct {
			Message struct {
				Content *string `json:"content"`
				Refusal *string `json:"refusal"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Choices) != 1 {
		t.Fatalf("answer status %d: %v", resp.StatusCode, err)
	}
	m := out.Choices[0].Message
	if m.Content != nil {
		content = *m.Content
	}
	if m.Refusal != nil {
		refusal = *m.Refusal
	}
	return content, refusal
}

func TestFakeScriptsItsImperfections(t *testing.T) {
	t.Parallel()
	prompt := "Classify the post.\n<post>\n" + doc.Text + "\n</post>"
	tests := []struct {
		name  string
		b     Behaviour
		check func(t *testing.T, f *Fake)
	}{
		{"faithful", Behaviour{Processor: "p"}, func(t *testing.T, f *Fake) {
			c, _ := ask(t, f, prompt)
			var got map[string]any
			if err := json.Unmarshal([]byte(c), &got); err != nil || got["category"] != "spam" || got["severity"] != "low" {
				t.Errorf("answer = %s, want the labels", c)
			}
		}},
		{"category always wrong", Behaviour{Processor: "p", FieldErrorRate: map[string]float64{"category": 1}}, func(t *testing.T, f *Fake) {
			c, _ := ask(t, f, prompt)
			var got map[string]any
			_ = json.Unmarshal([]byte(c), &got)
			if got["category"] == "spam" || got["severity"] != "low" {
				t.Errorf("answer = %s, want another category and the labelled severity", c)
			}
			if again, _ := ask(t, f, prompt); again != c {
				t.Errorf("second answer %s differs from the first %s: draws must be seeded by the document", again, c)
			}
		}},
		{"invalid, then repaired", Behaviour{Processor: "p", SchemaInvalidRate: 1}, func(t *testing.T, f *Fake) {
			c, _ := ask(t, f, prompt)
			var got map[string]any
			_ = json.Unmarshal([]byte(c), &got)
			if _, hasLabels := got["labels"]; got["category"] != "unclear" && hasLabels {
				t.Errorf("first answer = %s, want it to break the schema", c)
			}
			r, _ := ask(t, f, prompt, c, "Your previous answer was not valid")
			if err := json.Unmarshal([]byte(r), &got); err != nil || got["category"] != "spam" || got["labels"] == nil {
				t.Errorf("repaired answer = %s, want the labels", r)
			}
		}},
		{"refuses", Behaviour{Processor: "p", RefusalRate: 1}, func(t *testing.T, f *Fake) {
			if c, r := ask(t, f, prompt); r == "" || c != "" {
				t.Errorf("answer = %q, refusal %q; want a refusal", c, r)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, err := Start(tt.b, schemaDoc(t), []Doc{doc})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			tt.check(t, f)
		})
	}
}

func TestLoadRejectsUnknownKeys(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "f.yaml")
	if err := os.WriteFile(p, []byte("fakes:\n  - {processor: a, latency: 5ms}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err == nil {
		t.Error("Load(unknown key latency) = nil, want an error")
	}
	if err := os.WriteFile(p, []byte("fakes:\n  - {processor: a, latency_p50: soon}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err == nil {
		t.Error("Load(latency_p50: soon) = nil, want an error")
	}
}
