// Package evalfake runs scripted, realistically imperfect stand-ins for LLM
// processors, so that `stetlab eval --demo-fakes` can compare processors
// offline. Each fake is the OpenAI-compatible fake (openaifake) with a
// scripted answer: it knows the labels of the documents it is shown and
// gets each field wrong at a configured rate, answers schema-invalid JSON
// and refusals now and then, and takes a log-normal time to answer.
//
// It is a demo and test tool: it keeps labels in memory and must never
// stand in for a processor outside `stet eval` (stet serve never starts
// one). Every draw is seeded from the document, so a rerun answers alike.
package evalfake

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/stetlabs/stet/processor/openai/openaifake"
	"github.com/stetlabs/stet/schema"
)

// Behaviour scripts one fake.
type Behaviour struct {
	// Processor is the processors[].id the fake stands in for.
	Processor string `yaml:"processor"`
	Seed      uint64 `yaml:"seed"`
	// FieldErrorRate is the share of documents whose field is answered
	// wrong: another enum value, or a label dropped or added.
	FieldErrorRate map[string]float64 `yaml:"field_error_rate"`
	// LatencyP50 and LatencyP95 shape a log-normal answer time.
	LatencyP50 string `yaml:"latency_p50"`
	LatencyP95 string `yaml:"latency_p95"`
	// SchemaInvalidRate is the share of first answers that break the
	// schema; RepairFailRate the chance that an answer to a repair request
	// breaks it again.
	SchemaInvalidRate float64 `yaml:"schema_invalid_rate"`
	RepairFailRate    float64 `yaml:"repair_fail_rate"`
	// RefusalRate is the share of documents refused (message.refusal).
	RefusalRate float64 `yaml:"refusal_rate"`
	// TransientRate is the share of calls answered 429, 500 or 503.
	TransientRate float64 `yaml:"transient_rate"`
}

// File is a --demo-fakes file.
type File struct {
	Fakes []Behaviour `yaml:"fakes"`
}

// Load reads a --demo-fakes file strictly.
func Load(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var f File
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("demo fakes %s: %w", path, err)
	}
	for i, b := range f.Fakes {
		if b.Processor == "" {
			return nil, fmt.Errorf("demo fakes %s: fakes[%d].processor required", path, i)
		}
		for _, d := range []string{b.LatencyP50, b.LatencyP95} {
			if d != "" {
				if _, err := time.ParseDuration(d); err != nil {
					return nil, fmt.Errorf("demo fakes %s: fakes[%d]: latency %q is not a duration", path, i, d)
				}
			}
		}
	}
	return &f, nil
}

// Doc is one document a fake may be shown: its text as the processor
// receives it (minimized) and its labelled output.
type Doc struct {
	Text     string
	Expected map[string]json.RawMessage
}

// Fake is one running stand-in.
type Fake struct {
	b     Behaviour
	docs  []Doc
	enums map[string][]string // enum values of string fields
	items map[string][]string // enum values of array fields' items
	// valid checks a scripted answer against the whole schema: a model's
	// wrong answer is still consistent in itself (the schema's conditional
	// rules hold), so a draw that breaks them is drawn again.
	valid    *schema.Schema
	p50, p95 time.Duration

	main, refuser *openaifake.Server
	http          *httptest.Server
	refuseMu      sync.Mutex
}

// Start starts a fake answering for docs under doc (the profile's JSON
// Schema). Close it when done.
func Start(b Behaviour, doc []byte, docs []Doc) (*Fake, error) {
	f := &Fake{b: b, docs: docs, enums: map[string][]string{}, items: map[string][]string{}}
	var s struct {
		Properties map[string]struct {
			Enum  []string `json:"enum"`
			Items *struct {
				Enum []string `json:"enum"`
			} `json:"items"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(doc, &s); err != nil {
		return nil, fmt.Errorf("evalfake: schema: %w", err)
	}
	for k, p := range s.Properties {
		if len(p.Enum) > 0 {
			f.enums[k] = p.Enum
		}
		if p.Items != nil && len(p.Items.Enum) > 0 {
			f.items[k] = p.Items.Enum
		}
	}
	var err error
	if f.valid, err = schema.Compile("evalfake", doc); err != nil {
		return nil, fmt.Errorf("evalfake: schema: %w", err)
	}
	f.p50, _ = time.ParseDuration(b.LatencyP50)
	f.p95, _ = time.ParseDuration(b.LatencyP95)
	f.main = openaifake.New(openaifake.Options{Respond: f.respond, FaultRate: b.TransientRate, Seed: int64(b.Seed)})
	f.refuser = openaifake.New(openaifake.Options{})
	f.http = httptest.NewServer(http.HandlerFunc(f.serve))
	return f, nil
}

// URL is the base URL to give the processor (it ends in /v1).
func (f *Fake) URL() string { return f.http.URL + "/v1" }

// Calls is the number of chat completion requests the fake answered.
func (f *Fake) Calls() int { return f.main.Calls() + f.refuser.Calls() }

// Close stops the fake.
func (f *Fake) Close() {
	f.http.Close()
	f.main.Close()
	f.refuser.Close()
}

// rng is the draw stream of one document (and one call number).
func (f *Fake) rng(doc int, stream uint64) *rand.Rand {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d\x00%s", doc, f.b.Processor)
	return rand.New(rand.NewPCG(f.b.Seed^h.Sum64(), stream))
}

func (f *Fake) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 32<<20))
	r.Body = io.NopCloser(bytes.NewReader(body))
	var req struct {
		Messages []struct {
			Role    string `json:"role"`
			Content any    `json:"content"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(body, &req)
	doc, turns := -1, 0
	if len(req.Messages) > 0 {
		if s, ok := req.Messages[0].Content.(string); ok {
			doc = f.find(s)
		}
		turns = len(req.Messages)
	}
	// Latency first, as a model takes its time before it refuses too.
	if doc >= 0 && f.p50 > 0 {
		rng := f.rng(doc, uint64(0x1a7+turns))
		sigma := 0.0
		if f.p95 > f.p50 {
			sigma = math.Log(float64(f.p95)/float64(f.p50)) / 1.645
		}
		d := time.Duration(float64(f.p50) * math.Exp(sigma*rng.NormFloat64()))
		select {
		case <-time.After(min(d, 30*time.Second)):
		case <-r.Context().Done():
			return
		}
	}
	if doc >= 0 && turns == 1 && f.rng(doc, 2).Float64() < f.b.RefusalRate {
		// The refusing server answers this one request with a refusal:
		// the fault queue is shared, so one refusal at a time.
		f.refuseMu.Lock()
		defer f.refuseMu.Unlock()
		f.refuser.Enqueue(openaifake.Fault{Kind: openaifake.Refusal})
		f.refuser.Handler().ServeHTTP(w, r)
		return
	}
	f.main.Handler().ServeHTTP(w, r)
}

// find is the document whose text the prompt holds (the longest, should
// one contain another).
func (f *Fake) find(prompt string) int {
	best := -1
	for i, d := range f.docs {
		if strings.Contains(prompt, d.Text) && (best < 0 || len(d.Text) > len(f.docs[best].Text)) {
			best = i
		}
	}
	return best
}

// respond is the scripted answer: the labels, with the configured errors.
func (f *Fake) respond(req openaifake.Request) string {
	doc := -1
	if len(req.Messages) > 0 {
		doc = f.find(req.Messages[0].Content)
	}
	var out map[string]any
	if doc < 0 {
		// A document it was not told about: the safe default.
		out = map[string]any{"category": "none", "severity": "none", "action": "allow", "labels": []string{}}
	} else {
		rng := f.rng(doc, 3)
		exp := f.docs[doc].Expected
		// Up to eight draws of the field errors for one consistent with the
		// whole schema; the labels as they are when none is.
		for try := 0; ; try++ {
			out = map[string]any{}
			for _, k := range slices.Sorted(maps.Keys(exp)) { // draws in a fixed order
				var x any
				_ = json.Unmarshal(exp[k], &x)
				if try < 8 && rng.Float64() < f.b.FieldErrorRate[k] {
					x = f.wrong(rng, k, x)
				}
				out[k] = x
			}
			if _, ok := out["rationale"]; !ok {
				out["rationale"] = "Scripted answer of a demo fake."
			}
			b, _ := json.Marshal(out)
			if try >= 8 || len(f.valid.Validate(b)) == 0 {
				break
			}
			// A model that gets the category wrong writes the rest to
			// match it, as the moderation schema's rules ask.
			cohere(out)
			if b, _ = json.Marshal(out); len(f.valid.Validate(b)) == 0 {
				break
			}
		}
	}
	if _, ok := out["rationale"]; !ok {
		out["rationale"] = "Scripted answer of a demo fake."
	}
	turns := len(req.Messages)
	if doc >= 0 {
		invalid := false
		if turns == 1 {
			invalid = f.rng(doc, 4).Float64() < f.b.SchemaInvalidRate
		} else {
			invalid = f.rng(doc, uint64(4+turns)).Float64() < f.b.RepairFailRate
		}
		if invalid {
			// The usual ways a model breaks a strict schema: a value
			// outside the enum, or a required key left out.
			if f.rng(doc, 5).IntN(2) == 0 {
				out["category"] = "unclear"
			} else {
				delete(out, "labels")
			}
		}
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// cohere makes a moderation answer consistent with its category: none
// has no severity, allows, and has no labels; any other category has a
// severity and is among the labels.
func cohere(out map[string]any) {
	cat, ok := out["category"].(string)
	if !ok {
		return
	}
	labels, _ := out["labels"].([]any)
	if cat == "none" {
		out["severity"], out["action"], out["labels"] = "none", "allow", []any{}
		return
	}
	if out["severity"] == "none" {
		out["severity"] = "medium"
	}
	if !slices.Contains(labels, any(cat)) {
		out["labels"] = append([]any{cat}, labels...)
	}
}

// wrong is a plausible wrong value of field k.
func (f *Fake) wrong(rng *rand.Rand, k string, v any) any {
	if vals := f.enums[k]; len(vals) > 1 {
		s, _ := v.(string)
		var others []string
		for _, e := range vals {
			if e != s {
				others = append(others, e)
			}
		}
		return others[rng.IntN(len(others))]
	}
	if vals := f.items[k]; len(vals) > 0 {
		arr, _ := v.([]any)
		var cur []string
		for _, x := range arr {
			if s, ok := x.(string); ok {
				cur = append(cur, s)
			}
		}
		if len(cur) > 0 && rng.IntN(2) == 0 {
			cur = slices.Delete(cur, 0, 1) // a label missed
		} else {
			add := vals[rng.IntN(len(vals))]
			if !slices.Contains(cur, add) {
				cur = append(cur, add) // a label too many
			} else {
				cur = slices.DeleteFunc(cur, func(s string) bool { return s == add })
			}
		}
		if cur == nil {
			cur = []string{}
		}
		return cur
	}
	return v
}
