package config

import (
	"reflect"
	"slices"
	"strings"
)

// Processor kinds.
const (
	KindRules              = "rules"
	KindOpenAI             = "openai"
	KindAnthropic          = "anthropic"
	KindGemini             = "gemini"
	KindInfrai             = "infrai"
	KindAzureContentSafety = "azure-content-safety"
)

// Transcriber kinds (docs/design.md §19): configured under transcribers,
// with the same declaration keys as a processor.
const (
	KindPocketsphinx     = "pocketsphinx"
	KindOpenAITranscribe = "openai-transcribe"
)

// ProcessorKinds lists every processor kind, in the order of the kinds
// table; TranscriberKinds every transcriber kind.
var (
	ProcessorKinds   = kindNames(false)
	TranscriberKinds = kindNames(true)
)

// kindSpec is what one processor kind takes and needs. Validation consults
// it instead of asking "which kind is this?"; wiring a new kind is a row
// here and a line in cmd/stet.
type kindSpec struct {
	name string
	// keys are the processor keys this kind takes beyond those every kind
	// takes (id, kind, region, retention, zero_data_retention,
	// subprocessors, timeout, limits). A key some other kind takes is an
	// error on this one.
	keys []string
	// notes say what a key means for this kind, in the problem reported
	// when another kind sets it: "openai (Azure OpenAI)".
	notes map[string]string
	// file is the key naming a file this kind reads at load; required.
	file string
	// batch: the kind has a provider batch API and takes the batch key.
	batch bool
	// needsModel, needsBaseURL, needsAPIKey: model, base_url (there is no
	// default endpoint) or api_key_env is required.
	needsModel   bool
	needsBaseURL bool
	needsAPIKey  bool
	// transcriber: the kind turns audio into text and is configured under
	// transcribers, never under processors.
	transcriber bool
}

// kinds is the kinds table. Its order is the order kinds are listed in
// problems.
var kinds = []kindSpec{
	{
		name: KindRules,
		keys: []string{"rules"},
		file: "rules",
	},
	{
		name:        KindOpenAI,
		keys:        []string{"base_url", "api_key_env", "model", "api_version"},
		notes:       map[string]string{"api_version": "Azure OpenAI"},
		batch:       true,
		needsModel:  true,
		needsAPIKey: true,
	},
	{
		name:        KindAnthropic,
		keys:        []string{"base_url", "api_key_env", "model", "tool_use", "max_tokens"},
		batch:       true,
		needsModel:  true,
		needsAPIKey: true,
	},
	{
		name:        KindGemini,
		keys:        []string{"base_url", "api_key_env", "model"},
		batch:       true,
		needsModel:  true,
		needsAPIKey: true,
	},
	{
		name:        KindInfrai,
		keys:        []string{"base_url", "api_key_env", "model"},
		batch:       true,
		needsAPIKey: true,
	},
	{
		// model is taken but unused: the processor's label names the API
		// version and the mapping (see cmd/stet).
		name:         KindAzureContentSafety,
		keys:         []string{"base_url", "api_key_env", "model", "mapping", "api_version"},
		file:         "mapping",
		needsBaseURL: true,
		needsAPIKey:  true,
	},
	{
		// Offline: Debian's recognizer and model on this host.
		name:        KindPocketsphinx,
		transcriber: true,
	},
	{
		// model defaults to gpt-4o-mini-transcribe; api_version selects
		// Azure OpenAI as for kind openai.
		name:        KindOpenAITranscribe,
		keys:        []string{"base_url", "api_key_env", "model", "api_version"},
		notes:       map[string]string{"api_version": "Azure OpenAI"},
		needsAPIKey: true,
		transcriber: true,
	},
}

func kindNames(transcriber bool) []string {
	var names []string
	for _, k := range kinds {
		if k.transcriber == transcriber {
			names = append(names, k.name)
		}
	}
	return names
}

// lookupKind returns the row of the kinds table for name among the
// processor kinds (transcriber false) or the transcriber kinds, or nil.
func lookupKind(name string, transcriber bool) *kindSpec {
	for i := range kinds {
		if kinds[i].name == name && kinds[i].transcriber == transcriber {
			return &kinds[i]
		}
	}
	return nil
}

func (k *kindSpec) takes(key string) bool { return slices.Contains(k.keys, key) }

// scopedKeys are the processor keys only some kinds take, in the order of
// Processor's fields, each with the index of its field.
var scopedKeys = func() []scopedKey {
	var keys []scopedKey
	t := reflect.TypeFor[Processor]()
	for i := range t.NumField() {
		key := yamlKey(t.Field(i))
		if slices.ContainsFunc(kinds, func(k kindSpec) bool { return k.takes(key) }) {
			keys = append(keys, scopedKey{key: key, field: i})
		}
	}
	return keys
}()

type scopedKey struct {
	key   string
	field int // index in Processor
}

// set reports whether pr gives the key a value other than its zero value.
func (k scopedKey) set(pr *Processor) bool {
	return !reflect.ValueOf(pr).Elem().Field(k.field).IsZero()
}

// str returns the key's field, which must be a string.
func (k scopedKey) str(pr *Processor) *string {
	return reflect.ValueOf(pr).Elem().Field(k.field).Addr().Interface().(*string)
}

func scoped(key string) scopedKey {
	i := slices.IndexFunc(scopedKeys, func(k scopedKey) bool { return k.key == key })
	return scopedKeys[i]
}

// notTaken says why kind must not set key: "not used by kind rules" when
// every other kind takes it, else the kinds that do ("used only by kinds
// openai (Azure OpenAI) and azure-content-safety").
func notTaken(kind, key string) string {
	transcriber := lookupKind(kind, true) != nil
	var users []string
	family := 0
	for _, k := range kinds {
		if k.transcriber != transcriber {
			continue
		}
		family++
		if !k.takes(key) {
			continue
		}
		name := k.name
		if note := k.notes[key]; note != "" {
			name += " (" + note + ")"
		}
		users = append(users, name)
	}
	if len(users) == family-1 {
		return "not used by kind " + kind
	}
	return "used only by " + kindList(users)
}

// batchKinds says which kinds take the batch key: "kinds openai, …".
func batchKinds() string {
	var names []string
	for _, k := range kinds {
		if k.batch {
			names = append(names, k.name)
		}
	}
	return kindList(names)
}

// kindList writes "kind a" or "kinds a, b and c".
func kindList(names []string) string {
	switch len(names) {
	case 0:
		return "no kind"
	case 1:
		return "kind " + names[0]
	}
	return "kinds " + strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
