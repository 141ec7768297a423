package stet

import (
	"context"
	"encoding/json"
	"time"
)

// Processor extracts structured JSON from minimized text. One package per
// provider implements it (processor/rules, processor/openai, …).
//
// Guarantees an implementation must give:
//   - It makes at most one provider call per Extract call and never retries on
//     its own: stet owns the retry policy (SDK retries are switched off).
//   - Every failure is a *ProcessorError carrying a FailureClass decided here,
//     at the boundary. The pipeline decides only from the class.
//   - Errors never carry document text, prompts or model output in their
//     Error string.
//   - It is safe for concurrent use.
type Processor interface {
	Extract(ctx context.Context, p ExtractParams) (*Extraction, error)
	Info() ProcessorInfo
}

// ExtractParams is one extraction request.
type ExtractParams struct {
	JobID   string
	Attempt int64 // the job's attempt token, for idempotency keys
	// Prompt is the profile's prompt rendered over the minimized text.
	Prompt Text
	// Input is the minimized text alone, for processors that do not prompt
	// (rules, moderation services).
	Input Text
	// SchemaName names the profile's schema ("moderation_v1").
	SchemaName string
	// Schema is the profile's JSON Schema.
	Schema json.RawMessage
	// Repair holds earlier invalid outputs of this attempt and the
	// validator's messages, oldest first; empty on the first call.
	Repair []RepairTurn
}

// RepairTurn is one invalid answer and what was wrong with it.
type RepairTurn struct {
	Output   []byte
	Problems []string
}

// Extraction is a processor's answer.
type Extraction struct {
	Output       json.RawMessage // the JSON document the model produced
	Raw          []byte          // the raw response body, as received
	Model        string
	RequestID    string
	StatusCode   int
	InputTokens  int
	OutputTokens int
	Latency      time.Duration
	// CostUSD is what the provider reports the call cost, when it does
	// (Infrai's metadata.cost_usd); it then stands for the call's cost in
	// place of its tokens at processors[].price.
	CostUSD *float64
}

// ProcessorInfo declares a processor's identity and data boundary.
type ProcessorInfo struct {
	ID               string   `json:"id"`
	Kind             string   `json:"kind"`
	Model            string   `json:"model,omitempty"`
	Region           string   `json:"region"`
	Retention        string   `json:"retention"`
	ZeroRetention    bool     `json:"zero_data_retention"`
	Subprocessors    []string `json:"subprocessors"`
	Capabilities     []string `json:"capabilities"`
	SendsTextOffHost bool     `json:"sends_text_off_host"`
	// Pending names the boundary declarations still unanswered (region,
	// retention, zero_data_retention, subprocessors, deletion): a
	// processor with any is never sent text.
	Pending []string `json:"pending,omitempty"`
}

// Profile is an extraction profile: what to extract and how to ask.
type Profile struct {
	ID      string
	Version int
	// Schema is the JSON Schema every output must satisfy.
	Schema json.RawMessage
	// Prompt is a text/template source; .Text is the minimized text.
	Prompt string
	// Parts split the schema's top-level fields among processors
	// (docs/design.md §16); empty: one request asks for the whole schema.
	Parts []Part
	// Part names the part this profile is, when it is one part of a
	// profile with parts: Schema is then that part's sub-schema.
	Part string
}

// Part is one part of a profile with parts: some of its schema's
// top-level fields, extracted by their own processors under the same
// identity ledger.
type Part struct {
	ID     string
	Fields []string // the top-level properties it extracts, in schema order
	// Processors are the processors that may extract it, first the
	// primary; empty: the source's policy's processors.
	Processors []string
}

// ExtractionVersion names the profile version a job extracts under
// ("moderation@1"). A new profile version is a new job for the same
// revision. A part's job extracts under its profile's version and the
// part's ID ("discharge@3#meds").
func (p *Profile) ExtractionVersion() string {
	v := p.ID + "@" + itoa(p.Version)
	if p.Part != "" {
		v += PartSeparator + p.Part
	}
	return v
}

// PartSeparator joins a profile's extraction version and a part's ID.
const PartSeparator = "#"

// SchemaName is the name sent to processors that want one.
func (p *Profile) SchemaName() string {
	n := p.ID + "_v" + itoa(p.Version)
	if p.Part != "" {
		n += "_" + p.Part
	}
	return n
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
