package config

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestKindsTable checks each row against what the kind is known to take
// and need: a change here is a change to the config contract.
func TestKindsTable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kind                                  string
		keys                                  []string
		file                                  string
		batch, needsModel, needsURL, needsKey bool
		transcriber                           bool
	}{
		{KindRules, []string{"rules"}, "rules", false, false, false, false, false},
		{KindOpenAI, []string{"base_url", "api_key_env", "model", "api_version"}, "", true, true, false, true, false},
		{KindAnthropic, []string{"base_url", "api_key_env", "model", "tool_use", "max_tokens"}, "", true, true, false, true, false},
		{KindGemini, []string{"base_url", "api_key_env", "model"}, "", true, true, false, true, false},
		{KindInfrai, []string{"base_url", "api_key_env", "model"}, "", true, false, false, true, false},
		{KindAzureContentSafety, []string{"base_url", "api_key_env", "model", "mapping", "api_version"}, "mapping", false, false, true, true, false},
		{KindPocketsphinx, nil, "", false, false, false, false, true},
		{KindOpenAITranscribe, []string{"base_url", "api_key_env", "model", "api_version"}, "", false, false, false, true, true},
	}
	if got := len(kinds); got != len(tests) {
		t.Errorf("len(kinds) = %d, want %d", got, len(tests))
	}
	for _, tt := range tests {
		k := lookupKind(tt.kind, tt.transcriber)
		if k == nil {
			t.Errorf("lookupKind(%q) = nil, want a row", tt.kind)
			continue
		}
		got := []any{k.keys, k.file, k.batch, k.needsModel, k.needsBaseURL, k.needsAPIKey}
		want := []any{tt.keys, tt.file, tt.batch, tt.needsModel, tt.needsURL, tt.needsKey}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("lookupKind(%q) = %v, want %v", tt.kind, got, want)
		}
	}
	if lookupKind("llama", false) != nil || lookupKind("", false) != nil || lookupKind(KindPocketsphinx, false) != nil {
		t.Errorf("lookupKind of an unknown kind returned a row")
	}
	if !slices.Equal(ProcessorKinds, []string{"rules", "openai", "anthropic", "gemini", "infrai", "azure-content-safety"}) {
		t.Errorf("ProcessorKinds = %q", ProcessorKinds)
	}
	if !slices.Equal(TranscriberKinds, []string{"pocketsphinx", "openai-transcribe"}) {
		t.Errorf("TranscriberKinds = %q", TranscriberKinds)
	}
}

// TestKindsTableConsistent checks that every row names keys Processor
// decodes, and that what a kind needs it also takes.
func TestKindsTableConsistent(t *testing.T) {
	t.Parallel()
	fields := fieldTypes(reflect.TypeFor[Processor]())
	for _, k := range kinds {
		for _, key := range k.keys {
			if fields[key] == nil {
				t.Errorf("kind %s takes %q, which Processor does not decode", k.name, key)
			}
		}
		for key := range k.notes {
			if !k.takes(key) {
				t.Errorf("kind %s has a note on %q, which it does not take", k.name, key)
			}
		}
		needs := map[string]bool{k.file: k.file != "", "model": k.needsModel, "base_url": k.needsBaseURL, "api_key_env": k.needsAPIKey}
		for key, need := range needs {
			if need && !k.takes(key) {
				t.Errorf("kind %s needs %q but does not take it", k.name, key)
			}
		}
		if k.file != "" && fields[k.file] != reflect.TypeFor[string]() {
			t.Errorf("kind %s reads the file named by %q, which is not text", k.name, k.file)
		}
	}
	var keys []string
	for _, k := range scopedKeys {
		keys = append(keys, k.key)
	}
	want := []string{"rules", "base_url", "api_key_env", "model", "mapping", "api_version", "tool_use", "max_tokens"}
	if !slices.Equal(keys, want) {
		t.Errorf("scopedKeys = %q, want %q", keys, want)
	}
}

func TestNotTaken(t *testing.T) {
	t.Parallel()
	tests := []struct{ kind, key, want string }{
		{KindRules, "base_url", "not used by kind rules"},
		{KindRules, "model", "not used by kind rules"},
		{KindOpenAI, "rules", "used only by kind rules"},
		{KindOpenAI, "mapping", "used only by kind azure-content-safety"},
		{KindGemini, "api_version", "used only by kinds openai (Azure OpenAI) and azure-content-safety"},
		{KindInfrai, "tool_use", "used only by kind anthropic"},
	}
	for _, tt := range tests {
		if got := notTaken(tt.kind, tt.key); got != tt.want {
			t.Errorf("notTaken(%q, %q) = %q, want %q", tt.kind, tt.key, got, tt.want)
		}
	}
	if got, want := batchKinds(), "kinds openai, anthropic, gemini and infrai"; got != want {
		t.Errorf("batchKinds() = %q, want %q", got, want)
	}
}

// TestLoadKindKeys sets each kind-specific key on each kind and checks
// that Load accepts it exactly when the kinds table says the kind takes it.
func TestLoadKindKeys(t *testing.T) {
	t.Parallel()
	values := map[string]string{
		"rules":       "profiles/moderation.rules.yaml",
		"base_url":    "https://api.example.org/v1",
		"api_key_env": "OPENAI_API_KEY",
		"model":       "m-1",
		"mapping":     "profiles/moderation.rules.yaml",
		"api_version": "2024-09-01",
		"tool_use":    "true",
		"max_tokens":  "100",
		"batch":       "{max_items: 10}",
	}
	for _, k := range kinds {
		for key, value := range values {
			t.Run(k.name+"/"+key, func(t *testing.T) {
				t.Parallel()
				// A processor that has everything its kind needs, and key.
				body := "    kind: " + k.name + "\n    region: us\n    retention: none\n"
				set := map[string]string{key: value}
				for need, ok := range map[string]bool{k.file: k.file != "", "model": k.needsModel, "base_url": k.needsBaseURL, "api_key_env": k.needsAPIKey} {
					if ok {
						set[need] = values[need]
					}
				}
				for sk, sv := range set {
					body += "    " + sk + ": " + sv + "\n"
				}
				section := "processors"
				yaml := strings.Replace(readExample(t), "processors:\n", "processors:\n  - id: probe\n"+body, 1)
				if k.transcriber {
					// A transcriber is declared under transcribers.
					section = "transcribers"
					yaml = readExample(t) + "transcribers:\n  - id: probe\n" + body
				}
				dir := writeConfig(t, yaml)
				_, err := Load(dir+"/stet.yaml", lookup(testEnv()))
				takes := k.takes(key) || (key == "batch" && k.batch)
				if takes && err != nil {
					t.Errorf("Load with kind %s and %s = %v, want no error", k.name, key, err)
				}
				if !takes && (err == nil || !strings.Contains(err.Error(), section+"[0]."+key+": ")) {
					t.Errorf("Load with kind %s and %s = %v, want a problem at %s[0].%s", k.name, key, err, section, key)
				}
			})
		}
	}
}
