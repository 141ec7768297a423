package eval

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/config"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/openai"
	"github.com/stetlabs/stet/processor/openai/openaifake"
	"github.com/stetlabs/stet/schema"
)

// testConfig writes a config over the quickstart's moderation profile:
// policy "standard" permits "oracle" only; "outside" is configured but
// not permitted.
func testConfig(t *testing.T, outsideURL string) *config.Config {
	t.Helper()
	dir := t.TempDir()
	prof, err := filepath.Abs(filepath.Join("..", "examples", "quickstart", "profiles"))
	if err != nil {
		t.Fatal(err)
	}
	yaml := `database: sqlite://prod.db
tenants: [{id: demo, tokens: [{name: ops, role: operator, token_env: T}]}]
sources: [{id: s, tenant: demo, secret_env: S, profile: moderation, policy: standard}]
profiles:
  - id: moderation
    version: 1
    schema: ` + prof + `/moderation.schema.json
    prompt: ` + prof + `/moderation.prompt.tmpl
    acceptance: {fields: {category: {min_accuracy: 0.9}}, max_schema_failure_rate: 0.05}
processors:
  - {id: oracle, kind: rules, rules: ` + prof + `/moderation.rules.yaml, region: local, retention: none}
  - {id: outside, kind: openai, base_url: "` + outsideURL + `", api_key_env: K, model: m, region: us, retention: none, price: {input_per_mtok: 1, output_per_mtok: 2}}
policies:
  - {id: standard, processors: [oracle], minimize: [email, phone]}
workers: {concurrency: 4}
`
	path := filepath.Join(dir, "stet.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadWithoutSecrets(path, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func testItems(n int) []Item {
	cats := []string{"spam", "none", "harassment", "none", "self_harm"}
	var items []Item
	for i := range n {
		c := cats[i%len(cats)]
		sev, act, labels := map[string]string{"spam": "low", "none": "none", "harassment": "medium", "self_harm": "high"}[c],
			map[string]string{"spam": "remove", "none": "allow", "harassment": "remove", "self_harm": "escalate"}[c], `["`+c+`"]`
		if c == "none" {
			labels = `[]`
		}
		split := SplitDev
		if i%5 == 4 {
			split = SplitHoldout
		}
		items = append(items, Item{Line: i + 1, ExternalID: "doc-" + string(rune('a'+i%26)) + string(rune('a'+i/26)),
			Text:     "post number " + strings.Repeat("x", i+1) + " mail me at a" + string(rune('a'+i%26)) + "@example.com",
			Expected: map[string]json.RawMessage{"category": q(c), "severity": q(sev), "action": q(act), "labels": json.RawMessage(labels)},
			Split:    split, Tags: []string{"t" + string(rune('0'+i%2))}})
	}
	return items
}

func q(s string) json.RawMessage { b, _ := json.Marshal(s); return b }

// oracle answers each document's label (wrong on every seventh), found by
// the minimized text it is sent; block makes calls after the first n wait
// until their context ends.
type oracle struct {
	id      string // default "oracle"
	items   []Item
	calls   atomic.Int64
	blockAt int64 // 0: never
	sawRaw  atomic.Bool
	mu      sync.Mutex
	schemas [][]string // the top-level properties of each request's schema
}

func (o *oracle) Info() stet.ProcessorInfo {
	return stet.ProcessorInfo{ID: cmpOr(o.id, "oracle"), Kind: "rules", Region: "local", Retention: "none"}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (o *oracle) Extract(ctx context.Context, p stet.ExtractParams) (*stet.Extraction, error) {
	n := o.calls.Add(1)
	props, _ := schema.Properties(p.Schema)
	o.mu.Lock()
	o.schemas = append(o.schemas, props)
	o.mu.Unlock()
	if o.blockAt > 0 && n > o.blockAt {
		<-ctx.Done()
		return nil, &stet.ProcessorError{Class: stet.FailureTransient, Code: "cancelled", Err: ctx.Err()}
	}
	in := p.Input.Reveal()
	if strings.Contains(in, "@example.com") {
		o.sawRaw.Store(true) // minimization should have removed it
	}
	for i, it := range o.items {
		if strings.HasPrefix(in, "post number "+strings.Repeat("x", len(it.Text)-len("post number ")-len(" mail me at aa@example.com"))+" ") {
			out := map[string]json.RawMessage{"rationale": q("oracle")}
			for k, v := range it.Expected {
				out[k] = v
			}
			if i%7 == 3 {
				// A wrong answer, consistent in itself (the schema's
				// conditional rules hold).
				out["category"], out["labels"] = q("misinformation"), json.RawMessage(`["misinformation"]`)
				out["severity"], out["action"] = q("medium"), q("review")
			}
			for k := range out {
				if !slices.Contains(props, k) {
					delete(out, k) // answer the schema asked for, as a strict model does
				}
			}
			b, _ := json.Marshal(out)
			return &stet.Extraction{Output: b, Raw: b, Model: "oracle-1", InputTokens: 100, OutputTokens: 20}, nil
		}
	}
	return nil, &stet.ProcessorError{Class: stet.FailureUnsupported, Code: "unknown_document", Err: errors.New("unknown document")}
}

// A processor outside the profile's policy is refused with the reason and
// never called: its fake server counts no request, and the factory is
// never asked to build it.
func TestRunRefusesProcessorOutsidePolicy(t *testing.T) {
	t.Parallel()
	fake := openaifake.New(openaifake.Options{})
	defer fake.Close()
	cfg := testConfig(t, fake.URL())
	items := testItems(10)
	or := &oracle{items: items}
	var built []string
	var mu sync.Mutex
	rep, err := Run(context.Background(), Params{
		Config: cfg, Profile: "moderation", Items: items, Processors: []string{"oracle", "outside", "missing"}, Out: t.TempDir(),
		New: func(pc *config.Processor) (stet.Processor, error) {
			mu.Lock()
			built = append(built, pc.ID)
			mu.Unlock()
			if pc.ID == "outside" {
				return openai.New(openai.Config{Common: processor.Common{ID: pc.ID, BaseURL: pc.BaseURL, APIKey: "k", Model: "m", Region: "us"}})
			}
			return or, nil
		},
	})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	if got := fake.Calls(); got != 0 {
		t.Errorf("the refused processor's server got %d calls, want 0", got)
	}
	if strings.Join(built, ",") != "oracle" {
		t.Errorf("processors built = %v, want only oracle", built)
	}
	want := map[string]string{"outside": `policy "standard" does not permit it`, "missing": "not configured"}
	for _, p := range rep.Processors {
		if w, ok := want[p.ID]; ok && !strings.Contains(p.Refused, w) {
			t.Errorf("processor %s refused = %q, want %q", p.ID, p.Refused, w)
		}
	}
	if rep.Passed() {
		t.Error("Report.Passed() = true with refused processors, want false")
	}
	if or.sawRaw.Load() {
		t.Error("the processor saw an email address: the eval did not minimize as the policy says")
	}
	if got := or.calls.Load(); got != 10 {
		t.Errorf("oracle calls = %d, want 10 (one per document)", got)
	}
	o := rep.Processors[0]
	// Every seventh document from the fourth (3 and 10 → only 3 of 0..9) is wrong.
	if got := o.Fields[0].Accuracy; got != 0.9 {
		t.Errorf("category accuracy = %v, want 0.9", got)
	}
	if !o.Acceptance.Pass {
		t.Errorf("acceptance = %+v, want pass (0.9 >= 0.9)", o.Acceptance)
	}
	if o.Tokens.Input != 1000 || o.Tokens.Output != 200 || o.Tokens.Calls != 10 {
		t.Errorf("tokens = %+v, want 1000 in, 200 out, 10 calls", o.Tokens)
	}
}

// An eval interrupted halfway continues from its scratch ledger, extracts
// no document twice, and gives the report an uninterrupted eval gives.
func TestRunResumesAfterInterruption(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, "http://127.0.0.1:1/v1")
	items := testItems(30)
	out := t.TempDir()

	ctx, cancel := context.WithCancel(context.Background())
	first := &oracle{items: items, blockAt: 12}
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, Params{Config: cfg, Profile: "moderation", Items: items, Processors: []string{"oracle"}, Out: out,
			New: func(*config.Processor) (stet.Processor, error) { return first, nil }})
		done <- err
	}()
	deadline := time.Now().Add(20 * time.Second)
	for first.calls.Load() < 14 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, ErrInterrupted) {
		t.Fatalf("interrupted Run = %v, want ErrInterrupted", err)
	}

	second := &oracle{items: items}
	resumed, err := Run(context.Background(), Params{Config: cfg, Profile: "moderation", Items: items, Processors: []string{"oracle"}, Out: out,
		New: func(*config.Processor) (stet.Processor, error) { return second, nil }})
	if err != nil {
		t.Fatalf("resumed Run = %v", err)
	}
	if got := second.calls.Load(); got > 30-12 {
		t.Errorf("resumed Run made %d calls, want at most %d: the 12 documents extracted before the interruption are not extracted again", got, 30-12)
	}
	fresh, err := Run(context.Background(), Params{Config: cfg, Profile: "moderation", Items: items, Processors: []string{"oracle"}, Out: t.TempDir(),
		New: func(*config.Processor) (stet.Processor, error) { return &oracle{items: items}, nil }})
	if err != nil {
		t.Fatalf("fresh Run = %v", err)
	}
	a, b := withoutTimes(t, resumed), withoutTimes(t, fresh)
	if a != b {
		t.Errorf("resumed report differs from an uninterrupted one:\nresumed: %s\nfresh:   %s", a, b)
	}

	// Other inputs in the same folder are refused rather than mixed in.
	_, err = Run(context.Background(), Params{Config: cfg, Profile: "moderation", Items: items[:5], Processors: []string{"oracle"}, Out: out,
		New: func(*config.Processor) (stet.Processor, error) { return second, nil }})
	if err == nil || !strings.Contains(err.Error(), "other inputs") {
		t.Errorf("Run with other labels in the same --out = %v, want an error naming other inputs", err)
	}
}

// withoutTimes is the report's JSON without the latency figures and token
// counts of calls cut short by the interruption (the only things a clock
// or an interruption may change).
func withoutTimes(t *testing.T, r *Report) string {
	t.Helper()
	c := *r
	c.Processors = nil
	for _, p := range r.Processors {
		p.Latency = Latency{}
		p.Tokens.Calls = 0
		c.Processors = append(c.Processors, p)
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestReadLabelsReportsBadLinesByNumber(t *testing.T) {
	t.Parallel()
	const secret = "SECRET-TEXT-never-in-errors"
	in := `{"external_id":"a","text":"ok","expected":{"category":"none"}}
{"external_id":"b","text":"` + secret + `"}

not json ` + secret + `
{"external_id":"a","text":"again","expected":{"category":"spam"}}
{"external_id":"c","text":"x","expected":{"category":"spam"},"split":"train"}
{"external_id":"d","text":"x","expected":{"category":"spam"},"colour":"red"}
`
	items, bad, err := ReadLabels(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 1 || items[0].ExternalID != "a" {
		t.Errorf("items = %+v, want only a", items)
	}
	want := map[int]string{2: "expected required", 4: "not a JSON object", 5: "duplicate external_id (first at line 1)", 6: "split must be", 7: "unknown key"}
	if len(bad) != len(want) {
		t.Errorf("bad lines = %v, want %d", bad, len(want))
	}
	for _, b := range bad {
		if !strings.Contains(b.Reason, want[b.Line]) {
			t.Errorf("line %d reason = %q, want %q", b.Line, b.Reason, want[b.Line])
		}
		if strings.Contains(b.Error(), secret) {
			t.Errorf("line %d error quotes the line: %q", b.Line, b.Error())
		}
	}
}

func TestHTMLIsSelfContainedWithCharts(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, "http://127.0.0.1:1/v1")
	items := testItems(15)
	out := t.TempDir()
	rep, err := Run(context.Background(), Params{Config: cfg, Profile: "moderation", Items: items, Processors: []string{"oracle", "outside"}, Out: out,
		New: func(*config.Processor) (stet.Processor, error) { return &oracle{items: items}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteFiles(out, rep); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	html := string(b)
	for _, bad := range []string{"http://", "https://", "<script", "src=", "@import"} {
		if strings.Contains(html, bad) {
			t.Errorf("report.html contains %q: it must not reach the network", bad)
		}
	}
	// Accuracy, latency, cost, and one confusion heatmap per enum field.
	if n := strings.Count(html, "<svg"); n != 3+3 {
		t.Errorf("report.html has %d inline SVG charts, want 6", n)
	}
	// Two of the 15 (the 4th and 11th) are wrong: 86.7 % < 90 %.
	for _, want := range []string{`class="verdict fail"`, `class="verdict refused"`, "oracle", "outside", "Confusion matrices", "category accuracy 86.7% &lt; 90.0%"} {
		if !strings.Contains(html, want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	var back Report
	j, _ := os.ReadFile(filepath.Join(out, "report.json"))
	if err := json.Unmarshal(j, &back); err != nil || len(back.Processors) != 2 {
		t.Errorf("report.json = %v, %d processors; want 2", err, len(back.Processors))
	}
}
