package rules

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor/processortest"
	"github.com/stetlabs/stet/schema"
)

const (
	quickstartRules = "../../examples/quickstart/profiles/moderation.rules.yaml"
	quickstartDir   = "../../examples/quickstart/samples"
)

// sample is a quickstart webhook body.
type sample struct {
	ExternalID string            `json:"external_id"`
	Revision   int64             `json:"revision"`
	Text       string            `json:"text"`
	Metadata   map[string]string `json:"metadata"`
}

func quickstart(t *testing.T) *Processor {
	t.Helper()
	p, err := New(Params{ID: "local-rules", RulesPath: quickstartRules, Schema: processortest.ReadFile(t, processortest.QuickstartSchema)})
	if err != nil {
		t.Fatalf("New(quickstart) = %v", err)
	}
	return p
}

func extract(t *testing.T, p *Processor, text string, schema []byte) processortest.Moderation {
	t.Helper()
	x, err := p.Extract(context.Background(), stet.ExtractParams{JobID: "job_1", Input: stet.NewText(text), Schema: schema})
	if err != nil {
		t.Fatalf("Extract(%q) error = %v", text, err)
	}
	return processortest.DecodeModeration(t, x.Output)
}

func TestQuickstartSamples(t *testing.T) {
	t.Parallel()
	schemaDoc := processortest.ReadFile(t, processortest.QuickstartSchema)
	sch, err := schema.Compile("moderation", schemaDoc)
	if err != nil {
		t.Fatal(err)
	}
	p := quickstart(t)

	want := map[string]processortest.Moderation{
		"report-001.json":    {Category: "unsafe_medical_advice", Severity: "high", Action: "remove", Labels: []string{"unsafe_medical_advice"}},
		"report-002.json":    {Category: "harassment", Severity: "medium", Action: "remove", Labels: []string{"harassment"}},
		"report-003.json":    {Category: "self_harm", Severity: "high", Action: "escalate", Labels: []string{"self_harm"}},
		"report-003.r2.json": {Category: "self_harm", Severity: "medium", Action: "escalate", Labels: []string{"self_harm"}},
		"report-004.json":    {Category: "spam", Severity: "low", Action: "remove", Labels: []string{"spam"}},
		"report-005.json":    {Category: "privacy_exposure", Severity: "high", Action: "remove", Labels: []string{"privacy_exposure"}},
		"report-006.json":    {Category: "misinformation", Severity: "medium", Action: "review", Labels: []string{"misinformation"}},
		"report-007.json":    {Category: "none", Severity: "none", Action: "allow", Labels: []string{}},
		"report-008.json":    {Category: "none", Severity: "none", Action: "allow", Labels: []string{}},
		"report-009.json":    {Category: "none", Severity: "none", Action: "allow", Labels: []string{}},
	}

	files, err := filepath.Glob(filepath.Join(quickstartDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	if got, wantNames := names, sortedKeys(want); !slices.Equal(got, wantNames) {
		t.Fatalf("samples = %v, want %v", got, wantNames)
	}

	for _, name := range names {
		var s sample
		dec := json.NewDecoder(bytes.NewReader(processortest.ReadFile(t, filepath.Join(quickstartDir, name))))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			t.Fatalf("sample %s: %v", name, err)
		}
		if s.ExternalID == "" || s.Revision < 1 || s.Text == "" || s.Metadata["community"] == "" {
			t.Errorf("sample %s: want external_id, revision >= 1, text and metadata.community", name)
		}
		x, err := p.Extract(context.Background(), stet.ExtractParams{JobID: "job_" + name, Input: stet.NewText(s.Text), Schema: schemaDoc})
		if err != nil {
			t.Fatalf("Extract(%s) error = %v", name, err)
		}
		if problems := sch.Validate(x.Output); problems != nil {
			t.Errorf("Extract(%s) output %s does not validate: %v", name, x.Output, problems)
		}
		if !bytes.Equal(x.Raw, x.Output) {
			t.Errorf("Extract(%s) Raw = %s, want the output %s", name, x.Raw, x.Output)
		}
		var got processortest.Moderation
		if err := json.Unmarshal(x.Output, &got); err != nil {
			t.Fatal(err)
		}
		w := want[name]
		if got.Category != w.Category || got.Severity != w.Severity || got.Action != w.Action || !slices.Equal(got.Labels, w.Labels) {
			t.Errorf("Extract(%s) = %s/%s/%s %v (%s), want %s/%s/%s %v",
				name, got.Category, got.Severity, got.Action, got.Labels, got.Rationale, w.Category, w.Severity, w.Action, w.Labels)
		}
	}

	// The table covers every category of the schema.
	seen := map[string]bool{}
	for _, m := range want {
		seen[m.Category] = true
	}
	for _, c := range []string{"self_harm", "unsafe_medical_advice", "harassment", "privacy_exposure", "misinformation", "spam", "none"} {
		if !seen[c] {
			t.Errorf("no sample expects category %s", c)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TestQuickstartSamplesShowMinimization: one sample must carry an email and
// a phone number so the quickstart shows minimization at work, and one must
// be revision 2 of an earlier report.
func TestQuickstartSamplesShowMinimization(t *testing.T) {
	t.Parallel()
	email := regexp.MustCompile(`[\w.+-]+@[\w-]+\.[\w.]+`)
	phone := regexp.MustCompile(`\(?\d{3}\)?[\s.-]?\d{3}[\s.-]\d{4}`)
	files, _ := filepath.Glob(filepath.Join(quickstartDir, "*.json"))
	var both, r2 bool
	ids := map[string]bool{}
	revs := map[string][]int64{}
	for _, f := range files {
		var s sample
		if err := json.Unmarshal(processortest.ReadFile(t, f), &s); err != nil {
			t.Fatal(err)
		}
		if email.MatchString(s.Text) && phone.MatchString(s.Text) {
			both = true
		}
		ids[s.ExternalID] = true
		revs[s.ExternalID] = append(revs[s.ExternalID], s.Revision)
	}
	for _, r := range revs {
		if slices.Contains(r, 1) && slices.Contains(r, 2) {
			r2 = true
		}
	}
	if !both {
		t.Error("no sample holds both an email address and a phone number")
	}
	if !r2 {
		t.Error("no sample is revision 2 of a report whose revision 1 is also a sample")
	}
}

var variantCases = []struct {
	text string
	want string // category
}{
	// self_harm
	{"Honestly I just want to die, nothing helps the pain.", "self_harm"},
	{"I’m going to end it tonight, I’m sorry.", "self_harm"},
	{"How many of my sleeping pills would be lethal?", "self_harm"},
	{"I've been feeling suicidal since the diagnosis.", "self_harm"},
	{"I keep hurting myself again when the flare gets bad.", "self_harm"},
	{"I don't want to be here anymore.", "self_harm"},
	{"Some nights I wish I could disappear.", "self_harm"},
	// harassment
	{"Honestly just kys, nobody cares.", "harassment"},
	{"You're such a total LOSER, get off this forum.", "harassment"},
	{"I hope your cancer comes back.", "harassment"},
	{"You’re faking it for attention and everyone knows.", "harassment"},
	// unsafe medical advice
	{"STOP TAKING YOUR INSULIN. Your body knows best.", "unsafe_medical_advice"},
	{"You should stop the chemo and try a raw vegan diet.", "unsafe_medical_advice"},
	{"Just ditch all of your meds, they're making you sick.", "unsafe_medical_advice"},
	{"Try turmeric paste instead of chemo, it worked for my aunt.", "unsafe_medical_advice"},
	{"A few drops of MMS in water every hour kills the parasites; start by drinking a spoonful of chlorine dioxide.", "unsafe_medical_advice"},
	{"If your sugar is high, just double your insulin dose.", "unsafe_medical_advice"},
	{"I can sell some of my leftover oxycodone if anyone needs it.", "unsafe_medical_advice"},
	// privacy
	{"Her home address is [ADDRESS], go ask her yourself.", "privacy_exposure"},
	{"sunflower22's real name is on her Facebook, I'll post it.", "privacy_exposure"},
	{"Someone should dox that troll.", "privacy_exposure"},
	{"FYI his HIV status is positive, he told my cousin.", "privacy_exposure"},
	// misinformation
	{"Chemo is poison and the oncologists know it.", "misinformation"},
	{"Covid was a hoax to sell vaccines.", "misinformation"},
	// spam
	{"DM me to order the supplement that fixed my thyroid!", "spam"},
	{"Moms, earn $300 a day from your kitchen table.", "spam"},
	{"Free shipping this week and 15% off with code THYRO at [URL]", "spam"},
	// benign: word boundaries and context
	{"My doctor put me on doxycycline for ten days.", "none"},
	{"I walked 5 kms today, first time since surgery!", "none"},
	{"I cut myself chopping onions, the blood thinners make it bleed forever.", "none"},
	{"Did you stop taking your meds before the colonoscopy?", "none"},
	{"Please don't ever stop taking your blood thinners without your cardiologist.", "none"},
	{"I had to stop the chemo for two weeks because my counts were low.", "none"},
	{"Does anyone have a promo code for test strips?", "none"},
	{"My diet is finally working and the dietitian is thrilled.", "none"},
	{"In the end it all worked out and the biopsy was clear.", "none"},
	{"Don't kill yourself over the paperwork, the clinic will fix it.", "none"},
	{"It's a myth that vaccines cause autism, please read the studies.", "none"},
	{"I don't believe vaccines cause autism at all.", "none"},
	{"Her email to the clinic got lost, so she called instead.", "none"},
	{"Here's the study link: https://journal.example.org/abc", "none"},
}

// TestQuickstartVariants is the baseline's regression suite: realistic
// variants the rules must catch, and benign posts they must leave alone.
func TestQuickstartVariants(t *testing.T) {
	t.Parallel()
	p := quickstart(t)
	schema := processortest.ReadFile(t, processortest.QuickstartSchema)
	for _, tt := range variantCases {
		got := extract(t, p, tt.text, schema)
		if got.Category != tt.want {
			t.Errorf("Extract(%q) category = %s (%s), want %s", tt.text, got.Category, got.Rationale, tt.want)
		}
	}
}

// TestQuickstartSeveralCategories: the most severe category wins, and the
// labels and rationale keep every one that matched, most severe first.
func TestQuickstartSeveralCategories(t *testing.T) {
	t.Parallel()
	p := quickstart(t)
	tests := []struct {
		text string
		want processortest.Moderation
	}{
		{"Her email is [EMAIL]. You are a pathetic liar.", processortest.Moderation{
			Category: "privacy_exposure", Severity: "high", Action: "remove",
			Labels: []string{"privacy_exposure", "harassment"}, Rationale: "matched: privacy-doxxing, harassment-insult",
		}},
		{"Use promo code CURE for 20% off. Honestly I just want to die.", processortest.Moderation{
			Category: "self_harm", Severity: "high", Action: "escalate",
			Labels: []string{"self_harm", "spam"}, Rationale: "matched: self-harm-intent, spam-promo",
		}},
		{"Vaccines cause autism, so stop taking your antibiotics too.", processortest.Moderation{
			Category: "unsafe_medical_advice", Severity: "high", Action: "remove",
			Labels: []string{"unsafe_medical_advice", "misinformation"}, Rationale: "matched: unsafe-med-stop-treatment, misinformation-claims",
		}},
	}
	for _, tt := range tests {
		got := extract(t, p, tt.text, nil)
		if got.Category != tt.want.Category || got.Severity != tt.want.Severity || got.Action != tt.want.Action ||
			!slices.Equal(got.Labels, tt.want.Labels) || got.Rationale != tt.want.Rationale {
			t.Errorf("Extract(%q) = %+v, want %+v", tt.text, got, tt.want)
		}
	}
}

// TestRationaleNeverQuotesInput runs every sample with a canary word woven
// into it and checks the output carries neither the canary nor any run of
// the sample's own words.
func TestRationaleNeverQuotesInput(t *testing.T) {
	t.Parallel()
	const canary = "zqxcanary7741"
	p := quickstart(t)
	files, _ := filepath.Glob(filepath.Join(quickstartDir, "*.json"))
	for _, f := range files {
		var s sample
		if err := json.Unmarshal(processortest.ReadFile(t, f), &s); err != nil {
			t.Fatal(err)
		}
		text := canary + " " + strings.ReplaceAll(s.Text, ". ", ". "+canary+" ") + " " + canary
		x, err := p.Extract(context.Background(), stet.ExtractParams{Input: stet.NewText(text)})
		if err != nil {
			t.Fatalf("Extract(%s) error = %v", filepath.Base(f), err)
		}
		for _, out := range [][]byte{x.Output, x.Raw, []byte(x.Model)} {
			if bytes.Contains(out, []byte(canary)) {
				t.Errorf("Extract(%s) output %s contains the canary", filepath.Base(f), out)
			}
		}
		words := strings.Fields(s.Text)
		for i := 0; i+3 <= len(words); i++ {
			run := strings.Join(words[i:i+3], " ")
			if bytes.Contains(bytes.ToLower(x.Output), []byte(strings.ToLower(run))) {
				t.Errorf("Extract(%s) output %s quotes %q from the text", filepath.Base(f), x.Output, run)
			}
		}
	}
}
