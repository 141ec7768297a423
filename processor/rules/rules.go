// Package rules is stet's embedded, offline processor: deterministic keyword
// and regular-expression rules per profile, read from a YAML file whose format
// docs/rules.md describes. It is the quickstart default and the baseline in
// every evaluation.
//
// It never sends text anywhere and makes no network call. It must never copy
// document text into its output, an error or a log: the rationale it writes
// names matched rule IDs only, and labels and values come from the rules
// file, never from the document.
package rules

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
)

// Kind is the processor kind this package implements.
const Kind = "rules"

// Codes of the *stet.ProcessorError values Extract returns.
const (
	// CodeEmptyInput: the minimized text is empty or only whitespace. Class
	// unsupported: a person classifies it, nothing is retried.
	CodeEmptyInput = "empty_input"
	// CodeSchemaMismatch: the rules set a property the call's schema does not
	// declare, or a value it does not allow. Class unsupported.
	CodeSchemaMismatch = "schema_mismatch"
	// CodeCancelled: the context ended before the rules finished. Class
	// transient: the stage attempt may run again.
	CodeCancelled = "cancelled"
)

// Params configures New.
type Params struct {
	// ID is the configured processor ID ("local-rules").
	ID string
	// RulesPath is the rules file. It is read once, by New.
	RulesPath string
	// RulesYAML is the rules file's content. When set, RulesPath is not
	// read; it only names the rules in errors.
	RulesYAML []byte
	// Schema is the profile's JSON Schema. When set, New checks that the
	// defaults and every rule's set name only properties the schema declares,
	// with values its type, enum and const allow, and that every required
	// property gets a value. Extract repeats the check (once per distinct
	// schema) for the schema each call carries.
	Schema json.RawMessage
}

// Processor applies one rules file. It is immutable after New and safe for
// concurrent use.
type Processor struct {
	id    string
	model string
	set   *ruleSet
	// fitted caches the schema check per schema.
	fitted processor.SchemaFits
}

var _ stet.Processor = (*Processor)(nil)

// New loads and compiles a rules file. A bad regular expression, an unknown
// key, a duplicate rule ID, a rule without set, or a set that does not fit
// p.Schema is an error naming the rule ID, the key and the line.
func New(p Params) (*Processor, error) {
	if p.ID == "" {
		return nil, errors.New("rules processor: id is required")
	}
	name := p.RulesPath
	data := p.RulesYAML
	if data == nil {
		if p.RulesPath == "" {
			return nil, fmt.Errorf("rules processor %s: rules path is required", p.ID)
		}
		b, err := os.ReadFile(p.RulesPath)
		if err != nil {
			return nil, fmt.Errorf("rules processor %s: read rules: %w", p.ID, err)
		}
		data = b
	}
	if name == "" {
		name = "(inline)"
	}
	set, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("rules processor %s: rules file %s: %w", p.ID, name, err)
	}
	proc := &Processor{
		id:    p.ID,
		model: "rules-" + stet.SHA256Hex(data)[:12],
		set:   set,
	}
	if len(p.Schema) > 0 {
		if err := proc.fits(p.Schema); err != nil {
			return nil, fmt.Errorf("rules processor %s: rules file %s: %w", p.ID, name, err)
		}
	}
	return proc, nil
}

// Profile returns the profile the rules file says it was written for, or "".
func (p *Processor) Profile() string { return p.set.profile }

// Info declares the processor's boundary: local, nothing retained, no text
// leaves the host.
func (p *Processor) Info() stet.ProcessorInfo {
	return stet.ProcessorInfo{
		ID:               p.id,
		Kind:             Kind,
		Model:            p.model,
		Region:           "local",
		Retention:        "none",
		ZeroRetention:    true,
		Subprocessors:    []string{},
		Capabilities:     []string{"sync", "json_schema"},
		SendsTextOffHost: false,
	}
}

// Extract classifies params.Input (the minimized text; the prompt is not
// used). The same input and rules always give byte-identical output, in the
// key order of the rules file's defaults. Errors are *stet.ProcessorError:
// unsupported for empty input or a schema the rules do not fit, transient
// when ctx ends first.
func (p *Processor) Extract(ctx context.Context, params stet.ExtractParams) (*stet.Extraction, error) {
	start := time.Now()
	if ctx.Err() != nil {
		return nil, cancelled(ctx)
	}
	if len(params.Schema) > 0 {
		if err := p.fits(params.Schema); err != nil {
			return nil, &stet.ProcessorError{Class: stet.FailureUnsupported, Code: CodeSchemaMismatch, Err: err}
		}
	}
	text := fold(params.Input.Reveal())
	if strings.TrimSpace(text) == "" {
		return nil, &stet.ProcessorError{Class: stet.FailureUnsupported, Code: CodeEmptyInput}
	}
	fired, err := p.set.evaluate(ctx, text)
	if err != nil {
		return nil, cancelled(ctx)
	}
	out := p.set.render(fired)
	return &stet.Extraction{
		Output:  out,
		Raw:     bytes.Clone(out),
		Model:   p.model,
		Latency: time.Since(start),
	}, nil
}

// fits checks the rules against schema once per distinct schema.
func (p *Processor) fits(schema json.RawMessage) error {
	return p.fitted.Check(schema, p.set.checkSchema)
}

func cancelled(ctx context.Context) error {
	return &stet.ProcessorError{Class: stet.FailureTransient, Code: CodeCancelled, Err: context.Cause(ctx)}
}
