package rules

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor/processortest"
)

// testSchema is a small profile schema for the synthetic rules below.
const testSchema = `{
  "type": "object", "additionalProperties": false,
  "required": ["kind", "level", "labels", "why"],
  "properties": {
    "kind":   {"type": "string", "enum": ["none", "a", "b", "c"]},
    "level":  {"type": "integer"},
    "flag":   {"type": "boolean"},
    "labels": {"type": "array", "items": {"type": "string"}},
    "why":    {"type": "string"}
  }
}`

// testRules has the shape every synthetic test starts from; tests append
// rules to it.
const testRulesHead = `
version: 1
defaults: {kind: none, level: 0, flag: false, labels: [], why: "no rule matched"}
labels_field: labels
rationale_field: why
negation:
  window: 3
  cues: [never, "don't", do not]
rules:
`

func newTest(t *testing.T, rules string) *Processor {
	t.Helper()
	p, err := New(Params{ID: "test-rules", RulesYAML: []byte(testRulesHead + rules), Schema: json.RawMessage(testSchema)})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	return p
}

type testOut struct {
	Kind   string   `json:"kind"`
	Level  int      `json:"level"`
	Flag   bool     `json:"flag"`
	Labels []string `json:"labels"`
	Why    string   `json:"why"`
}

func run(t *testing.T, p *Processor, text string) (testOut, []byte) {
	t.Helper()
	x, err := p.Extract(context.Background(), stet.ExtractParams{Input: stet.NewText(text), Schema: json.RawMessage(testSchema)})
	if err != nil {
		t.Fatalf("Extract(%q) error = %v", text, err)
	}
	var o testOut
	if err := json.Unmarshal(x.Output, &o); err != nil {
		t.Fatalf("Extract(%q) output %s: %v", text, x.Output, err)
	}
	return o, x.Output
}

func TestExtractDefaultsInFileOrder(t *testing.T) {
	t.Parallel()
	p := newTest(t, `
  - id: r1
    any: [alpha]
    set: {kind: a}
`)
	_, out := run(t, p, "nothing to see")
	want := `{"kind":"none","level":0,"flag":false,"labels":[],"why":"no rule matched"}`
	if string(out) != want {
		t.Errorf("Extract(no match) = %s, want %s", out, want)
	}
	_, out = run(t, p, "Alpha!")
	want = `{"kind":"a","level":0,"flag":false,"labels":["r1"],"why":"matched: r1"}`
	if string(out) != want {
		t.Errorf("Extract(match) = %s, want %s", out, want)
	}
}

func TestDeterminism(t *testing.T) {
	t.Parallel()
	texts := []string{
		"Stop taking your insulin and email me at [EMAIL], promo code X, 10% off at [URL]. I want to die.",
		"A quiet thank-you post.",
	}
	// Two processors loaded from the same file give the same bytes, every
	// time, from many goroutines at once.
	a, b := quickstart(t), quickstart(t)
	for _, text := range texts {
		first, err := a.Extract(context.Background(), stet.ExtractParams{Input: stet.NewText(text)})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		outs := make([][]byte, 16)
		for i := range outs {
			wg.Go(func() {
				p := a
				if i%2 == 1 {
					p = b
				}
				x, err := p.Extract(context.Background(), stet.ExtractParams{Input: stet.NewText(text)})
				if err != nil {
					t.Error(err)
					return
				}
				outs[i] = x.Output
			})
		}
		wg.Wait()
		for i, out := range outs {
			if !bytes.Equal(out, first.Output) {
				t.Errorf("Extract(%q) run %d = %s, want %s", text, i, out, first.Output)
			}
		}
	}
}

func TestPriority(t *testing.T) {
	t.Parallel()
	p := newTest(t, `
  - id: low
    priority: 10
    any: [apple]
    set: {kind: a, level: 1, flag: true}
    label: la
  - id: high
    priority: 50
    any: [banana]
    set: {kind: b, level: 5}
    label: lb
  - id: tie-first
    priority: 50
    any: [cherry]
    set: {kind: c}
    label: lc
  - id: tie-second
    priority: 50
    any: [cherry]
    set: {kind: a}
    label: ld
`)
	tests := []struct {
		text string
		want testOut
	}{
		// The higher priority wins every property it sets; a property only
		// the lower rule sets keeps the lower rule's value. Labels and
		// rationale list every matched rule, most important first.
		{"apple and banana", testOut{Kind: "b", Level: 5, Flag: true, Labels: []string{"lb", "la"}, Why: "matched: high, low"}},
		{"banana apple", testOut{Kind: "b", Level: 5, Flag: true, Labels: []string{"lb", "la"}, Why: "matched: high, low"}},
		{"apple", testOut{Kind: "a", Level: 1, Flag: true, Labels: []string{"la"}, Why: "matched: low"}},
		// On equal priority, the rule earlier in the file wins.
		{"cherry", testOut{Kind: "c", Level: 0, Labels: []string{"lc", "ld"}, Why: "matched: tie-first, tie-second"}},
		{"banana cherry", testOut{Kind: "b", Level: 5, Labels: []string{"lb", "lc", "ld"}, Why: "matched: high, tie-first, tie-second"}},
	}
	for _, tt := range tests {
		got, _ := run(t, p, tt.text)
		if got.Kind != tt.want.Kind || got.Level != tt.want.Level || got.Flag != tt.want.Flag || !slices.Equal(got.Labels, tt.want.Labels) || got.Why != tt.want.Why {
			t.Errorf("Extract(%q) = %+v, want %+v", tt.text, got, tt.want)
		}
	}
}

func TestLabelsAreCollectedOnce(t *testing.T) {
	t.Parallel()
	p := newTest(t, `
  - id: one
    any: [alpha]
    set: {kind: a}
    label: la
  - id: two
    any: [beta]
    set: {kind: a}
    label: la
`)
	got, _ := run(t, p, "alpha beta")
	if !slices.Equal(got.Labels, []string{"la"}) || got.Why != "matched: one, two" {
		t.Errorf("Extract(alpha beta) = %+v, want labels [la] and both ids", got)
	}
}

func TestPhraseMatching(t *testing.T) {
	t.Parallel()
	p := newTest(t, `
  - id: die
    any: [die]
    set: {kind: a}
  - id: self-harm
    any: [self-harm]
    set: {kind: a}
  - id: wildcard
    any: [suicid*]
    set: {kind: a}
  - id: apostrophe
    any: ["can't go on"]
    set: {kind: a}
  - id: symbol
    any: ["$$$"]
    set: {kind: a}
  - id: unicode
    any: [café]
    set: {kind: a}
`)
	tests := []struct {
		text string
		want []string // rule ids, most important first (all priority 0: file order)
	}{
		{"I want to die.", []string{"die"}},
		{"DIE", []string{"die"}},
		{"die-hard fans", []string{"die"}},
		{"my diet changed", nil},
		{"the diesel bus", nil},
		{"studied hard", nil},
		{"no self harm here", []string{"self-harm"}},
		{"Self-Harm", []string{"self-harm"}},
		{"self -\tharm", []string{"self-harm"}},
		{"selfharm", nil},
		{"thoughts were suicidal", []string{"wildcard"}},
		{"suicide", []string{"wildcard"}},
		{"presuicidal", nil},
		{"I can’t go on", []string{"apostrophe"}}, // curly apostrophe folded
		{"I can't  go on", []string{"apostrophe"}},
		{"I cant go on", nil},
		{"earn $$$ fast", []string{"symbol"}},
		{"at the café", []string{"unicode"}},
		{"cafés", nil}, // é and s are both letters: no boundary
		{"zero\u200bwidth d\u200bie", []string{"die"}},
	}
	for _, tt := range tests {
		got, _ := run(t, p, tt.text)
		want := "no rule matched"
		if len(tt.want) > 0 {
			want = "matched: " + strings.Join(tt.want, ", ")
		}
		if got.Why != want {
			t.Errorf("Extract(%q) rationale = %q, want %q", tt.text, got.Why, want)
		}
	}
}

func TestNegationAndUnless(t *testing.T) {
	t.Parallel()
	p := newTest(t, `
  - id: stop
    negatable: true
    any: [stop taking your insulin]
    set: {kind: a}
    label: la
  - id: plain
    any: [stop taking your insulin]
    set: {kind: b}
    label: lb
  - id: claim
    regex: ['\bvaccines?\s+cause\s+autism\b']
    unless: [myth, debunked]
    unless_regex: ['\bno\s+link\b']
    set: {kind: c}
    label: lc
`)
	tests := []struct {
		text string
		want string // rationale
	}{
		{"Stop taking your insulin.", "matched: stop, plain"},
		{"Never stop taking your insulin.", "matched: plain"},
		{"You should never, ever stop taking your insulin.", "matched: plain"},
		{"Please DO NOT stop taking your insulin!", "matched: plain"},
		{"Don’t stop taking your insulin.", "matched: plain"},
		// A cue in an earlier sentence does not reach.
		{"Never again. Stop taking your insulin.", "matched: stop, plain"},
		// A cue further than the window (3 words) does not reach.
		{"Never let anyone tell you to stop taking your insulin.", "matched: stop, plain"},
		// One negated and one plain occurrence: the plain one counts.
		{"Never stop taking your insulin. Actually, stop taking your insulin.", "matched: stop, plain"},
		// "never" must be a word: "nevertheless" is no cue.
		{"Nevertheless stop taking your insulin.", "matched: stop, plain"},
		{"Vaccines cause autism.", "matched: claim"},
		{"The idea that vaccines cause autism is a myth.", "no rule matched"},
		{"Vaccines cause autism? Debunked long ago.", "no rule matched"},
		{"Vaccines cause autism, they say, but there is no   link.", "no rule matched"},
		{"Vaccines cause autism, a mythical claim.", "matched: claim"},
	}
	for _, tt := range tests {
		got, _ := run(t, p, tt.text)
		if got.Why != tt.want {
			t.Errorf("Extract(%q) rationale = %q, want %q", tt.text, got.Why, tt.want)
		}
	}
}

func TestMinMatchesAndTerms(t *testing.T) {
	t.Parallel()
	p := newTest(t, `
  - id: promo
    min_matches: 2
    any: [promo code, order now]
    regex: ['\b\d+%\s+off\b', '\b${fruit}\s+deal\b']
    set: {kind: a}
terms:
  fruit: ["apples?", "pears?"]
`)
	tests := []struct {
		text string
		want bool
	}{
		{"promo code please", false},
		{"promo code, 20% off", true},
		{"order now! order now!", false}, // one phrase twice is one signal
		{"Apple deal, order now", true},
		{"pear deal, promo code", true},
		{"pear deals, promo code", false}, // regex entries check their own boundaries
		{"plum deal, promo code", false},
	}
	for _, tt := range tests {
		got, _ := run(t, p, tt.text)
		if (got.Kind == "a") != tt.want {
			t.Errorf("Extract(%q) = %+v, want matched %v", tt.text, got, tt.want)
		}
	}
}

// TestRegexMatchNotCopied: a regex that matches arbitrary document words
// still writes only the rule's id and label.
func TestRegexMatchNotCopied(t *testing.T) {
	t.Parallel()
	p := newTest(t, `
  - id: secret
    regex: ['\bsecret\w*']
    set: {kind: a}
    label: la
`)
	got, out := run(t, p, "secretZQXcanary is here")
	if got.Kind != "a" || bytes.Contains(bytes.ToLower(out), []byte("zqxcanary")) {
		t.Errorf("Extract(canary) = %s, want a match that does not quote the text", out)
	}
}

func TestExtractErrors(t *testing.T) {
	t.Parallel()
	p := newTest(t, `
  - id: r
    any: [alpha]
    set: {kind: a}
`)
	cancelledCtx, cancel := context.WithCancel(context.Background())
	cancel()
	otherSchema := json.RawMessage(`{"type":"object","properties":{"kind":{"type":"string","enum":["x"]}}}`)
	tests := []struct {
		name   string
		ctx    context.Context
		params stet.ExtractParams
		class  stet.FailureClass
		code   string
	}{
		{"empty", context.Background(), stet.ExtractParams{}, stet.FailureUnsupported, CodeEmptyInput},
		{"whitespace", context.Background(), stet.ExtractParams{Input: stet.NewText(" \n\t\u200b ")}, stet.FailureUnsupported, CodeEmptyInput},
		{"prompt only", context.Background(), stet.ExtractParams{Prompt: stet.NewText("alpha")}, stet.FailureUnsupported, CodeEmptyInput},
		{"cancelled", cancelledCtx, stet.ExtractParams{Input: stet.NewText("alpha")}, stet.FailureTransient, CodeCancelled},
		{"schema mismatch", context.Background(), stet.ExtractParams{Input: stet.NewText("alpha"), Schema: otherSchema}, stet.FailureUnsupported, CodeSchemaMismatch},
	}
	for _, tt := range tests {
		x, err := p.Extract(tt.ctx, tt.params)
		var pe *stet.ProcessorError
		if !errors.As(err, &pe) {
			t.Errorf("Extract(%s) = %v, %v; want a *stet.ProcessorError", tt.name, x, err)
			continue
		}
		if pe.Class != tt.class || pe.Code != tt.code {
			t.Errorf("Extract(%s) error = %s/%s, want %s/%s", tt.name, pe.Class, pe.Code, tt.class, tt.code)
		}
		if x != nil {
			t.Errorf("Extract(%s) extraction = %v, want nil with an error", tt.name, x)
		}
	}
	// The schema mismatch is remembered and reported again, the same way.
	_, err := p.Extract(context.Background(), stet.ExtractParams{Input: stet.NewText("alpha"), Schema: otherSchema})
	if stet.ClassOf(err) != stet.FailureUnsupported {
		t.Errorf("Extract(schema mismatch, again) = %v, want unsupported", err)
	}
}

func TestExtractCancelledKeepsCause(t *testing.T) {
	t.Parallel()
	p := quickstart(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("shutting down")
	cancel(cause)
	_, err := p.Extract(ctx, stet.ExtractParams{Input: stet.NewText("hello")})
	if !errors.Is(err, cause) {
		t.Errorf("Extract(cancelled) = %v, want it to wrap the cause", err)
	}
	if strings.Contains(err.Error(), "hello") {
		t.Errorf("Extract(cancelled) error %q quotes the text", err)
	}
}

func TestInfo(t *testing.T) {
	t.Parallel()
	p := quickstart(t)
	info := p.Info()
	if info.ID != "local-rules" || info.Kind != "rules" || info.Region != "local" || info.Retention != "none" ||
		!info.ZeroRetention || info.SendsTextOffHost || !slices.Equal(info.Capabilities, []string{"sync", "json_schema"}) ||
		info.Subprocessors == nil || len(info.Subprocessors) != 0 {
		t.Errorf("Info() = %+v", info)
	}
	if !regexp.MustCompile(`^rules-[0-9a-f]{12}$`).MatchString(info.Model) {
		t.Errorf("Info().Model = %q, want rules-<12 hex>", info.Model)
	}
	x, err := p.Extract(context.Background(), stet.ExtractParams{Input: stet.NewText("hi")})
	if err != nil {
		t.Fatal(err)
	}
	if x.Model != info.Model || x.StatusCode != 0 || x.RequestID != "" {
		t.Errorf("Extract() = model %q status %d request %q, want model %q, no status, no request id", x.Model, x.StatusCode, x.RequestID, info.Model)
	}
	if p.Profile() != "moderation" {
		t.Errorf("Profile() = %q, want moderation", p.Profile())
	}
	// The model names the rules content: an edit changes it.
	a := newTest(t, "  - {id: r, any: [alpha], set: {kind: a}}\n")
	b := newTest(t, "  - {id: r, any: [alpha], set: {kind: b}}\n")
	if a.Info().Model == b.Info().Model {
		t.Errorf("Info().Model = %q for two different rules files", a.Info().Model)
	}
}

func BenchmarkExtract(b *testing.B) {
	p, err := New(Params{ID: "local-rules", RulesPath: quickstartRules})
	if err != nil {
		b.Fatal(err)
	}
	for _, size := range []int{1, 100} {
		text := strings.Repeat("Does anyone have tips for the fatigue on methotrexate? My rheumatologist said never stop taking your methotrexate without calling her first. ", size)
		b.Run(fmt.Sprintf("bytes=%d", len(text)), func(b *testing.B) {
			params := stet.ExtractParams{Input: stet.NewText(text)}
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				if _, err := p.Extract(context.Background(), params); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestSentences(t *testing.T) {
	t.Parallel()
	p := newTest(t, `
  - id: phrase
    any: [stop taking]
    set: {kind: a}
  - id: dose
    regex: ['\b2\.5\s+mg\b']
    set: {kind: a}
  - id: start
    regex: ['^quit\b']
    set: {kind: a}
`)
	tests := []struct {
		text string
		want string // rationale
	}{
		{"I had to stop taking it", "matched: phrase"},
		{"I had to stop. Taking walks helps.", "no rule matched"},
		{"I had to stop!\nTaking walks helps.", "no rule matched"},
		{"Take 2.5 mg at night.", "matched: dose"},
		{"Fine. Quit it.", "matched: start"},
		{"Fine!!  \n  quit it", "matched: start"},
		{"I will never quit it", "no rule matched"},
		{"see example.com/quit it", "no rule matched"},
	}
	for _, tt := range tests {
		got, _ := run(t, p, tt.text)
		if got.Why != tt.want {
			t.Errorf("Extract(%q) rationale = %q, want %q", tt.text, got.Why, tt.want)
		}
	}
}

// TestPrefilterNeverHidesAMatch checks, for every pattern of the quickstart
// file and a corpus of texts, that skipping sentences by needed literals
// finds exactly what running the pattern on every sentence finds.
func TestPrefilterNeverHidesAMatch(t *testing.T) {
	t.Parallel()
	p := quickstart(t)
	texts := []string{
		"Stop taking your insulin. I’M GOING TO END IT ALL tonight!! Her email is [EMAIL]; call 555-0100.",
		"Vaccines cause autism?? Big Pharma is hiding it. 20% off, promo code X, www.example.com",
		"How many of my pills would be lethal\nI keep hurting myself again. Never stop taking your meds.",
		"You’re such a pathetic attention-seeker. sunflower22's real name is Dana. She lives at 12 Elm.",
		"Try turmeric instead of chemo. Drinking a spoonful of MMS helps. Double your insulin dose.",
		"ſtop taking your insulin. Kys. KILL YOURSELF. I can sell my leftover oxycodone.",
	}
	for _, v := range variantCases {
		texts = append(texts, v.text)
	}
	// Every phrase of the file, upper-cased, inside a sentence.
	var file struct {
		Rules []struct{ Any, Unless []string }
	}
	if err := yaml.Unmarshal(processortest.ReadFile(t, quickstartRules), &file); err != nil {
		t.Fatal(err)
	}
	for _, r := range file.Rules {
		for _, ph := range slices.Concat(r.Any, r.Unless) {
			texts = append(texts, "So "+strings.ToUpper(strings.ReplaceAll(ph, "*", "al"))+" again.")
		}
	}
	var all []*pattern
	for _, r := range p.set.rules {
		all = append(all, r.patterns...)
		all = append(all, r.unless...)
	}
	for _, text := range texts {
		d := newDoc(fold(text))
		for i, pt := range all {
			plain := *pt
			plain.need = nil
			if got, want := pt.find(d, nil), plain.find(d, nil); got != want {
				t.Errorf("pattern %d (%s, needs %q) on %q: with prefilter %v, without %v", i, pt.re, pt.need, text, got, want)
			}
		}
	}
	// The corpus must exercise the patterns: most of them match something.
	matched := 0
	for _, pt := range all {
		for _, text := range texts {
			if pt.find(newDoc(fold(text)), nil) {
				matched++
				break
			}
		}
	}
	if matched < len(all)*2/3 {
		t.Errorf("corpus matches %d of %d patterns, want at least two thirds", matched, len(all))
	}
}

func TestNeeds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		expr string
		want []string
	}{
		{`(?i)\bStop\s+taking\s+your\b`, []string{"taking"}},
		{`(?i)(https?://|\bwww\.)\S+`, []string{"http", "www."}},
		{`(?i)\b\d{1,2}\s?%\s+off\b`, []string{"off"}},
		{`(?i)a*b?`, nil},
		{`(?i)(x|\d)`, nil},
		{`(?i)(ab){2,}`, []string{"ab"}},
	}
	for _, tt := range tests {
		if got := needs(tt.expr); !slices.Equal(got, tt.want) {
			t.Errorf("needs(%q) = %q, want %q", tt.expr, got, tt.want)
		}
	}
}
