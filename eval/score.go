package eval

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/config"
)

// Report is every figure of one eval; report.json is it, encoded.
type Report struct {
	Profile    string            `json:"profile"` // extraction version, "moderation@1"
	Policy     string            `json:"policy"`
	Labels     LabelsSummary     `json:"labels"`
	Acceptance *AcceptanceRule   `json:"acceptance,omitempty"`
	Fields     []FieldInfo       `json:"fields"`
	Processors []ProcessorReport `json:"processors"`
}

// LabelsSummary describes the labelled set.
type LabelsSummary struct {
	File     string         `json:"file"`
	Items    int            `json:"items"`
	Splits   map[string]int `json:"splits,omitempty"`
	BadLines []LineError    `json:"bad_lines,omitempty"`
}

// FieldInfo is one scored field: the schema's kind of it and its classes.
type FieldInfo struct {
	Name    string   `json:"name"`
	Kind    string   `json:"kind"` // enum | set | value
	Classes []string `json:"classes,omitempty"`
}

// Field kinds.
const (
	KindEnum  = "enum"  // a string with an enum: per-class figures
	KindSet   = "set"   // an array: set precision and recall
	KindValue = "value" // anything else: exact accuracy only
)

// AcceptanceRule is the profile's rule, as configured.
type AcceptanceRule struct {
	MinAccuracy          map[string]float64 `json:"min_accuracy,omitempty"`
	MaxSchemaFailureRate *float64           `json:"max_schema_failure_rate,omitempty"`
}

// ProcessorReport is one processor's figures.
type ProcessorReport struct {
	ID    string `json:"id"`
	Kind  string `json:"kind"`
	Model string `json:"model,omitempty"`
	// Refused says why the processor was not run (no call was made); every
	// other figure is then empty.
	Refused string `json:"refused,omitempty"`
	Items   int    `json:"items"`

	// DocumentAccuracy is the share of documents with every labelled field
	// right.
	DocumentAccuracy float64       `json:"document_accuracy"`
	DocumentCI       Interval      `json:"document_accuracy_ci95"`
	Fields           []FieldReport `json:"fields"`

	SchemaFailureRate float64        `json:"schema_failure_rate"` // manual records of class invalid_output, per document
	RepairRate        float64        `json:"repair_rate"`         // documents that needed at least one repair
	RefusalRate       float64        `json:"refusal_rate"`        // manual records of class refusal
	ManualRate        float64        `json:"manual_rate"`         // every manual record, whatever its class
	FailureClasses    map[string]int `json:"failure_classes,omitempty"`

	Latency Latency `json:"latency"`
	Tokens  Tokens  `json:"tokens"`
	Cost    Cost    `json:"cost"`

	BySplit []SplitReport `json:"by_split,omitempty"`
	ByTag   []TagReport   `json:"by_tag,omitempty"`

	Acceptance AcceptanceResult `json:"acceptance"`
}

// FieldReport is one field's figures for one processor.
type FieldReport struct {
	Name     string      `json:"name"`
	Accuracy float64     `json:"accuracy"`
	CI       Interval    `json:"accuracy_ci95"`
	Enum     *EnumScores `json:"enum,omitempty"`
	Set      *SetScores  `json:"set,omitempty"`
}

// Latency is in milliseconds.
type Latency struct {
	CallP50   float64 `json:"call_p50_ms"`
	CallP95   float64 `json:"call_p95_ms"`
	RecordP50 float64 `json:"record_p50_ms"`
	RecordP95 float64 `json:"record_p95_ms"`
	// Calls and Records are every sample, for the charts.
	Calls   []int64 `json:"call_ms"`
	Records []int64 `json:"record_ms"`
}

// Tokens are the processor's reported usage over every call.
type Tokens struct {
	Input  int64 `json:"input"`
	Output int64 `json:"output"`
	Calls  int   `json:"calls"`
}

// Cost is from processors[].price; Priced is false when the processor has
// no price (local processors cost nothing per token).
type Cost struct {
	Priced        bool    `json:"priced"`
	Total         float64 `json:"total_usd"`
	Per1000Docs   float64 `json:"per_1000_documents_usd"`
	InputPerMTok  float64 `json:"input_per_mtok,omitempty"`
	OutputPerMTok float64 `json:"output_per_mtok,omitempty"`
}

// SplitReport is the figures of one split of the labelled set.
type SplitReport struct {
	Split    string             `json:"split"`
	Items    int                `json:"items"`
	Accuracy map[string]float64 `json:"accuracy"`
	MacroF1  map[string]float64 `json:"macro_f1,omitempty"`
}

// TagReport is the accuracy of the first enum field (the headline field,
// "category" for moderation) on the items with one tag.
type TagReport struct {
	Tag      string  `json:"tag"`
	Items    int     `json:"items"`
	Field    string  `json:"field"`
	Accuracy float64 `json:"accuracy"`
}

// AcceptanceResult is whether the profile's rule holds.
type AcceptanceResult struct {
	Rule   bool    `json:"rule"` // false: the profile has no rule (Pass is then true)
	Pass   bool    `json:"pass"`
	Checks []Check `json:"checks,omitempty"`
}

// Check is one bound of the rule.
type Check struct {
	What string  `json:"what"` // "category accuracy", "schema failure rate"
	Op   string  `json:"op"`   // >= or <=
	Want float64 `json:"want"`
	Got  float64 `json:"got"`
	Pass bool    `json:"pass"`
}

// Passed reports whether every processor asked for was run and passes the
// acceptance rule.
func (r *Report) Passed() bool {
	for _, p := range r.Processors {
		if p.Refused != "" || !p.Acceptance.Pass {
			return false
		}
	}
	return true
}

// ScoreParams are the inputs of Score.
type ScoreParams struct {
	Config   *config.Config
	Profile  *config.Profile
	Policy   *stet.Policy
	Labels   string
	Items    []Item
	BadLines []LineError
	Asked    []string
	Refused  []Refusal
	Outcomes map[string][]Outcome // by processor, by item
}

// Score turns outcomes into the report. It is deterministic: the same
// outcomes give the same report, intervals included.
func Score(p ScoreParams) (*Report, error) {
	fields, err := scoredFields(p.Profile.SchemaJSON, p.Items)
	if err != nil {
		return nil, err
	}
	r := &Report{
		Profile: fmt.Sprintf("%s@%d", p.Profile.ID, p.Profile.Version), Policy: p.Policy.ID,
		Labels: LabelsSummary{File: p.Labels, Items: len(p.Items), BadLines: p.BadLines},
		Fields: fields,
	}
	for _, it := range p.Items {
		if it.Split != "" {
			if r.Labels.Splits == nil {
				r.Labels.Splits = map[string]int{}
			}
			r.Labels.Splits[it.Split]++
		}
	}
	acc := p.Profile.Acceptance
	if len(acc.Fields) > 0 || acc.MaxSchemaFailureRate != nil {
		r.Acceptance = &AcceptanceRule{MaxSchemaFailureRate: acc.MaxSchemaFailureRate}
		if len(acc.Fields) > 0 {
			r.Acceptance.MinAccuracy = map[string]float64{}
			for k, v := range acc.Fields {
				r.Acceptance.MinAccuracy[k] = v.MinAccuracy
			}
		}
	}
	seen := map[string]bool{}
	for _, id := range p.Asked {
		if seen[id] {
			continue
		}
		seen[id] = true
		pr := ProcessorReport{ID: id, Fields: []FieldReport{}}
		if pc := p.Config.Processor(id); pc != nil {
			pr.Kind = pc.Kind
		}
		if i := slices.IndexFunc(p.Refused, func(x Refusal) bool { return x.Processor == id }); i >= 0 {
			pr.Refused = p.Refused[i].Reason
			r.Processors = append(r.Processors, pr)
			continue
		}
		scoreProcessor(&pr, p, fields, p.Outcomes[id])
		r.Processors = append(r.Processors, pr)
	}
	return r, nil
}

func scoreProcessor(pr *ProcessorReport, p ScoreParams, fields []FieldInfo, outs []Outcome) {
	items := p.Items
	pr.Items = len(items)
	docOK := make([]bool, len(items))
	for i := range docOK {
		docOK[i] = true
	}
	fieldOK := map[string][]bool{}
	for _, f := range fields {
		ok := make([]bool, len(items))
		var exp, pred []string
		var expSet, predSet [][]string
		for i, it := range items {
			want, labelled := it.Expected[f.Name]
			got := outs[i].Output[f.Name]
			ok[i] = labelled && got != nil && sameValue(want, got, f.Kind)
			if labelled && !ok[i] {
				docOK[i] = false
			}
			switch f.Kind {
			case KindEnum:
				exp = append(exp, str(want))
				if got == nil {
					pred = append(pred, NoOutput)
				} else {
					pred = append(pred, str(got))
				}
			case KindSet:
				expSet = append(expSet, strs(want))
				if got == nil {
					predSet = append(predSet, nil)
				} else {
					predSet = append(predSet, strs(got))
				}
			}
		}
		fieldOK[f.Name] = ok
		fr := FieldReport{Name: f.Name, Accuracy: Accuracy(ok), CI: BootstrapCI(ok, seed(pr.ID, f.Name))}
		switch f.Kind {
		case KindEnum:
			s := ScoreEnum(f.Classes, exp, pred)
			fr.Enum = &s
		case KindSet:
			s := ScoreSets(expSet, predSet)
			fr.Set = &s
		}
		pr.Fields = append(pr.Fields, fr)
	}
	pr.DocumentAccuracy = Accuracy(docOK)
	pr.DocumentCI = BootstrapCI(docOK, seed(pr.ID, ""))

	pr.Latency.Calls, pr.Latency.Records = []int64{}, []int64{}
	var schemaFail, repaired, refused, manual int
	for _, o := range outs {
		if o.Model != "" && pr.Model == "" {
			pr.Model = o.Model
		}
		if o.Repairs > 0 {
			repaired++
		}
		if o.State == stet.JobManual || o.State == stet.JobBlocked {
			manual++
			if pr.FailureClasses == nil {
				pr.FailureClasses = map[string]int{}
			}
			pr.FailureClasses[string(o.FailureClass)]++
			switch o.FailureClass {
			case stet.FailureInvalidOutput:
				schemaFail++
			case stet.FailureRefusal:
				refused++
			}
		}
		pr.Tokens.Input += int64(o.InputTokens)
		pr.Tokens.Output += int64(o.OutputTokens)
		pr.Tokens.Calls += o.Calls
		pr.Latency.Calls = append(pr.Latency.Calls, o.CallMS...)
		if o.State == stet.JobCommitted || o.State == stet.JobManual {
			pr.Latency.Records = append(pr.Latency.Records, o.RecordMS)
		}
	}
	n := len(items)
	pr.SchemaFailureRate = ratio(schemaFail, n)
	pr.RepairRate = ratio(repaired, n)
	pr.RefusalRate = ratio(refused, n)
	pr.ManualRate = ratio(manual, n)
	pr.Latency.CallP50, pr.Latency.CallP95 = quantiles(pr.Latency.Calls)
	pr.Latency.RecordP50, pr.Latency.RecordP95 = quantiles(pr.Latency.Records)

	pr.Cost = cost(p.Config, pr.ID, outs)
	if n > 0 {
		pr.Cost.Per1000Docs = pr.Cost.Total / float64(n) * 1000
	}

	// Per split and per tag.
	splits := map[string][]int{}
	tags := map[string][]int{}
	for i, it := range items {
		if it.Split != "" {
			splits[it.Split] = append(splits[it.Split], i)
		}
		for _, t := range it.Tags {
			tags[t] = append(tags[t], i)
		}
	}
	for _, s := range sortedKeys(splits) {
		idx := splits[s]
		sr := SplitReport{Split: s, Items: len(idx), Accuracy: map[string]float64{}}
		for _, f := range fields {
			sr.Accuracy[f.Name] = Accuracy(pick(fieldOK[f.Name], idx))
			if f.Kind == KindEnum {
				var exp, pred []string
				for _, i := range idx {
					exp = append(exp, str(items[i].Expected[f.Name]))
					if g := outs[i].Output[f.Name]; g != nil {
						pred = append(pred, str(g))
					} else {
						pred = append(pred, NoOutput)
					}
				}
				if sr.MacroF1 == nil {
					sr.MacroF1 = map[string]float64{}
				}
				sr.MacroF1[f.Name] = ScoreEnum(f.Classes, exp, pred).MacroF1
			}
		}
		pr.BySplit = append(pr.BySplit, sr)
	}
	if head := headline(fields); head != "" {
		for _, t := range sortedKeys(tags) {
			idx := tags[t]
			pr.ByTag = append(pr.ByTag, TagReport{Tag: t, Items: len(idx), Field: head, Accuracy: Accuracy(pick(fieldOK[head], idx))})
		}
	}

	// The acceptance rule.
	acc := p.Profile.Acceptance
	pr.Acceptance = AcceptanceResult{Pass: true, Rule: len(acc.Fields) > 0 || acc.MaxSchemaFailureRate != nil}
	for _, name := range sortedKeys(acc.Fields) {
		got := 0.0
		if i := slices.IndexFunc(pr.Fields, func(f FieldReport) bool { return f.Name == name }); i >= 0 {
			got = pr.Fields[i].Accuracy
		}
		c := Check{What: name + " accuracy", Op: ">=", Want: acc.Fields[name].MinAccuracy, Got: got}
		c.Pass = c.Got >= c.Want
		pr.Acceptance.Checks = append(pr.Acceptance.Checks, c)
	}
	if m := acc.MaxSchemaFailureRate; m != nil {
		c := Check{What: "schema failure rate", Op: "<=", Want: *m, Got: pr.SchemaFailureRate}
		c.Pass = c.Got <= c.Want
		pr.Acceptance.Checks = append(pr.Acceptance.Checks, c)
	}
	for _, c := range pr.Acceptance.Checks {
		pr.Acceptance.Pass = pr.Acceptance.Pass && c.Pass
	}
}

// headline is the first enum field: the one the tag breakdown shows.
func headline(fields []FieldInfo) string {
	for _, f := range fields {
		if f.Kind == KindEnum {
			return f.Name
		}
	}
	return ""
}

func quantiles(ms []int64) (p50, p95 float64) {
	v := make([]float64, len(ms))
	for i, x := range ms {
		v[i] = float64(x)
	}
	slices.Sort(v)
	return Quantile(v, 0.5), Quantile(v, 0.95)
}

func pick(v []bool, idx []int) []bool {
	out := make([]bool, len(idx))
	for k, i := range idx {
		out[k] = v[i]
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func seed(processor, field string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(processor + "\x00" + field))
	return h.Sum64()
}

// sameValue compares a labelled and a predicted value: arrays as sets,
// everything else as canonical JSON.
func sameValue(want, got json.RawMessage, kind string) bool {
	if kind == KindSet {
		a, b := strs(want), strs(got)
		slices.Sort(a)
		b = slices.Compact(slices.Sorted(slices.Values(b)))
		a = slices.Compact(a)
		return slices.Equal(a, b)
	}
	return bytes.Equal(canonical(want), canonical(got))
}

func canonical(v json.RawMessage) []byte {
	var x any
	if json.Unmarshal(v, &x) != nil {
		return v
	}
	b, _ := json.Marshal(x)
	return b
}

func str(v json.RawMessage) string {
	var s string
	if json.Unmarshal(v, &s) != nil {
		return string(canonical(v))
	}
	return s
}

func strs(v json.RawMessage) []string {
	var a []any
	if json.Unmarshal(v, &a) != nil {
		return []string{string(canonical(v))}
	}
	out := make([]string, 0, len(a))
	for _, x := range a {
		if s, ok := x.(string); ok {
			out = append(out, s)
		} else {
			b, _ := json.Marshal(x)
			out = append(out, string(b))
		}
	}
	return out
}

// scoredFields lists the fields the labels hold, in the schema's property
// order (its required list first), with their kinds.
func scoredFields(schemaJSON []byte, items []Item) ([]FieldInfo, error) {
	type prop struct {
		Type  any   `json:"type"`
		Enum  []any `json:"enum"`
		Items *prop `json:"items"`
	}
	var s struct {
		Required   []string        `json:"required"`
		Properties map[string]prop `json:"properties"`
	}
	if err := json.Unmarshal(schemaJSON, &s); err != nil {
		return nil, fmt.Errorf("profile schema: %w", err)
	}
	labelled := map[string]bool{}
	for _, it := range items {
		for k := range it.Expected {
			labelled[k] = true
		}
	}
	order := slices.Clone(s.Required)
	for _, k := range sortedKeys(s.Properties) {
		if !slices.Contains(order, k) {
			order = append(order, k)
		}
	}
	for _, k := range sortedKeys(labelled) {
		if !slices.Contains(order, k) {
			order = append(order, k) // not in the schema: scored as a value
		}
	}
	var out []FieldInfo
	for _, name := range order {
		if !labelled[name] {
			continue
		}
		f := FieldInfo{Name: name, Kind: KindValue}
		p := s.Properties[name]
		switch {
		case len(p.Enum) > 0 && p.Type == "string":
			f.Kind = KindEnum
			for _, e := range p.Enum {
				f.Classes = append(f.Classes, fmt.Sprint(e))
			}
		case p.Type == "array":
			f.Kind = KindSet
			if p.Items != nil {
				for _, e := range p.Items.Enum {
					f.Classes = append(f.Classes, fmt.Sprint(e))
				}
			}
		}
		out = append(out, f)
	}
	return out, nil
}

// cost prices the tokens of outs, each processor's at its own price (a
// profile with parts calls the parts' processors too; an outcome without
// Tokens spent them all on processor id). It is priced when some
// processor has a price and every processor called has one or is the
// offline rules processor, which is free.
func cost(cfg *config.Config, id string, outs []Outcome) Cost {
	var c Cost
	if pc := cfg.Processor(id); pc != nil {
		c.InputPerMTok, c.OutputPerMTok = pc.Price.InputPerMTok, pc.Price.OutputPerMTok
	}
	priced, unpriced := false, false
	for _, o := range outs {
		tokens := o.Tokens
		if len(tokens) == 0 {
			tokens = map[string][2]int{id: {o.InputTokens, o.OutputTokens}}
		}
		for pid, t := range tokens {
			pc := cfg.Processor(pid)
			switch {
			case pc != nil && pc.Kind == "rules":
			case pc == nil || (pc.Price.InputPerMTok == 0 && pc.Price.OutputPerMTok == 0):
				unpriced = true
			default:
				priced = true
				c.Total += float64(t[0])/1e6*pc.Price.InputPerMTok + float64(t[1])/1e6*pc.Price.OutputPerMTok
			}
		}
	}
	c.Priced = priced && !unpriced
	if !c.Priced {
		c.Total = 0
	}
	return c
}
