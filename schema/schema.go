// Package schema compiles JSON Schema documents and validates instances
// against them, turning the validator's findings into short problem lines a
// person or a repair prompt can read.
//
// It is the only package that imports the JSON Schema library. A problem line
// names where in the instance something is wrong and what the schema wanted;
// it must never quote the instance's values or property names, because the
// instance is model output that may carry document text.
package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// maxProblems caps the lines Validate returns; a repair prompt gains nothing
// from the hundredth complaint about the same array.
const maxProblems = 50

// maxListed caps how many schema values (enum members, allowed properties)
// one problem line lists.
const maxListed = 20

// Schema is a compiled JSON Schema. It is safe for concurrent use.
type Schema struct {
	doc      json.RawMessage
	parsed   any
	url      string
	compiled *jsonschema.Schema
	// names holds every property name the schema itself declares. Only these
	// may appear in a problem's location; other keys came from the instance.
	names map[string]bool
}

// Compile compiles doc, a JSON Schema document named name (the name only
// labels errors). Documents without "$schema" are read as draft 2020-12.
// Objects are closed: a property the schema does not declare is invalid
// unless that level of the schema says otherwise (see closeObjects).
// References may point only inside the document or at the standard
// metaschemas: nothing is loaded from files or the network.
func Compile(name string, doc []byte) (*Schema, error) {
	parsed, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return nil, fmt.Errorf("schema %s: not valid JSON: %w", name, err)
	}
	parsed = closeObjects(parsed)
	loc := "stet:///" + url.PathEscape(name) + ".json"
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(refuseLoader{})
	if err := c.AddResource(loc, parsed); err != nil {
		return nil, fmt.Errorf("schema %s: %w", name, err)
	}
	compiled, err := c.Compile(loc)
	if err != nil {
		return nil, fmt.Errorf("schema %s: not a valid schema: %s", name, compileReason(err))
	}
	s := &Schema{
		doc:      slices.Clone(doc),
		parsed:   parsed,
		url:      loc,
		compiled: compiled,
		names:    map[string]bool{},
	}
	collectNames(parsed, s.names)
	return s, nil
}

// JSON returns the document the schema was compiled from.
func (s *Schema) JSON() json.RawMessage { return s.doc }

// Validate checks instance, a JSON document, against the schema. It returns
// nil when the instance is valid, and otherwise one line per problem, sorted,
// such as "/severity: must be integer (got string)". Locations are JSON
// pointers ("/" is the whole document); a property name that the schema does
// not declare is shown as "*".
func (s *Schema) Validate(instance []byte) []string {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(instance))
	if err != nil {
		return []string{"not valid JSON"}
	}
	err = s.compiled.Validate(v)
	if err == nil {
		return nil
	}
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return []string{"/: fails validation"}
	}
	w := walker{s: s, instance: v, seen: map[string]bool{}}
	w.walk(verr)
	if len(w.out) == 0 {
		return []string{"/: fails validation"}
	}
	slices.Sort(w.out)
	if len(w.out) > maxProblems {
		more := len(w.out) - maxProblems
		w.out = append(w.out[:maxProblems], fmt.Sprintf("… and %d more problems", more))
	}
	return w.out
}

// compileReason flattens a compiler error to one line. A metaschema failure
// becomes its leaf findings ("at '/type': got number, want string"), which
// point into the schema document, not at our internal resource URL.
func compileReason(err error) string {
	var serr *jsonschema.SchemaValidationError
	var verr *jsonschema.ValidationError
	if errors.As(err, &serr) && errors.As(serr.Err, &verr) {
		var leaves []string
		var walk func(*jsonschema.ValidationError)
		walk = func(e *jsonschema.ValidationError) {
			if len(e.Causes) == 0 {
				leaves = append(leaves, e.Error())
			}
			for _, c := range e.Causes {
				walk(c)
			}
		}
		walk(verr)
		return strings.Join(leaves, "; ")
	}
	return strings.Join(strings.Fields(err.Error()), " ")
}

// refuseLoader keeps compilation self-contained: a schema from a config file
// cannot make stet read another file or fetch a URL.
type refuseLoader struct{}

func (refuseLoader) Load(string) (any, error) {
	return nil, errors.New("external references are not supported")
}

type walker struct {
	s        *Schema
	instance any
	seen     map[string]bool
	out      []string
}

func (w *walker) add(loc []string, format string, args ...any) {
	line := w.location(loc) + ": " + fmt.Sprintf(format, args...)
	if !w.seen[line] {
		w.seen[line] = true
		w.out = append(w.out, line)
	}
}

// walk turns one node of the validator's error tree into problem lines.
// Structural kinds only group their causes; leaf kinds say what was wrong.
func (w *walker) walk(e *jsonschema.ValidationError) {
	loc := e.InstanceLocation
	switch k := e.ErrorKind.(type) {
	case *kind.Schema, *kind.Group, *kind.AllOf, *kind.Reference, *kind.ContentSchema:
		if len(e.Causes) == 0 {
			w.add(loc, "fails validation")
		}
	case *kind.AnyOf:
		w.add(loc, "must match at least one of the allowed alternatives (anyOf)")
	case *kind.OneOf:
		if len(k.Subschemas) == 2 {
			w.add(loc, "must match exactly one alternative (oneOf) but matches alternatives %d and %d", k.Subschemas[0], k.Subschemas[1])
		} else {
			w.add(loc, "must match exactly one of the allowed alternatives (oneOf)")
		}
	case *kind.Not:
		w.add(loc, "must not match the schema in \"not\"")
	case *kind.FalseSchema:
		if strings.HasSuffix(e.SchemaURL, "/unevaluatedProperties") && len(loc) > 0 {
			// A closed composing level (see closeObjects) refused a property
			// no member declared: say so at the object, as for
			// additionalProperties, without naming the property.
			w.add(loc[:len(loc)-1], "has a property the schema does not allow")
			return
		}
		w.add(loc, "is not allowed here")
	case *kind.Type:
		w.add(loc, "must be %s (got %s)", strings.Join(k.Want, " or "), k.Got)
	case *kind.Enum:
		w.add(loc, "value must be one of %s", listJSON(k.Want))
	case *kind.Const:
		w.add(loc, "value must be %s", compactJSON(k.Want))
	case *kind.Format:
		w.add(loc, "must be a valid %q", k.Want)
	case *kind.MinLength:
		w.add(loc, "must be at least %d characters long (got %d)", k.Want, k.Got)
	case *kind.MaxLength:
		w.add(loc, "must be at most %d characters long (got %d)", k.Want, k.Got)
	case *kind.Pattern:
		w.add(loc, "must match the pattern %q", k.Want)
	case *kind.Minimum:
		w.add(loc, "must be at least %s", ratString(k.Want))
	case *kind.Maximum:
		w.add(loc, "must be at most %s", ratString(k.Want))
	case *kind.ExclusiveMinimum:
		w.add(loc, "must be greater than %s", ratString(k.Want))
	case *kind.ExclusiveMaximum:
		w.add(loc, "must be less than %s", ratString(k.Want))
	case *kind.MultipleOf:
		w.add(loc, "must be a multiple of %s", ratString(k.Want))
	case *kind.Required:
		w.add(loc, "missing required %s %s", plural(len(k.Missing), "property", "properties"), listStrings(k.Missing))
	case *kind.DependentRequired:
		w.add(loc, "property %q requires %s", k.Prop, listStrings(k.Missing))
	case *kind.Dependency:
		w.add(loc, "property %q requires %s", k.Prop, listStrings(k.Missing))
	case *kind.AdditionalProperties:
		w.additional(loc, e, len(k.Properties))
	case *kind.PropertyNames:
		// The causes describe the offending name itself: never descend.
		w.add(loc, "has a property name that the schema does not allow (propertyNames)")
		return
	case *kind.MinProperties:
		w.add(loc, "must have at least %d properties (got %d)", k.Want, k.Got)
	case *kind.MaxProperties:
		w.add(loc, "must have at most %d properties (got %d)", k.Want, k.Got)
	case *kind.MinItems:
		w.add(loc, "must have at least %d items (got %d)", k.Want, k.Got)
	case *kind.MaxItems:
		w.add(loc, "must have at most %d items (got %d)", k.Want, k.Got)
	case *kind.AdditionalItems:
		w.add(loc, "has %d more items than the schema allows", k.Count)
	case *kind.UniqueItems:
		w.add(loc, "items %d and %d are equal; items must be unique", k.Duplicates[0], k.Duplicates[1])
	case *kind.Contains:
		// Each cause is an item that did not match: noise, not help.
		w.add(loc, "must contain at least one matching item (contains)")
		return
	case *kind.MinContains:
		w.add(loc, "must contain at least %d matching items (got %d)", k.Want, len(k.Got))
		return
	case *kind.MaxContains:
		w.add(loc, "must contain at most %d matching items (got %d)", k.Want, len(k.Got))
		return
	default:
		w.add(loc, "fails %s", keyword(e.ErrorKind))
	}
	for _, c := range e.Causes {
		w.walk(c)
	}
}

// additional reports properties the schema forbids. It names the properties
// the schema allows, never the ones the instance added.
func (w *walker) additional(loc []string, e *jsonschema.ValidationError, n int) {
	what := plural(n, "a property", fmt.Sprintf("%d properties", n))
	allowed := w.declaredProperties(e.SchemaURL)
	if len(allowed) == 0 {
		w.add(loc, "has %s the schema does not allow", what)
		return
	}
	w.add(loc, "has %s the schema does not allow; allowed: %s", what, listStrings(allowed))
}

// declaredProperties returns the "properties" names of the subschema at
// schemaURL, or nil when it cannot be found in this document.
func (w *walker) declaredProperties(schemaURL string) []string {
	base, frag, _ := strings.Cut(schemaURL, "#")
	if base != w.s.url {
		return nil
	}
	node := w.s.parsed
	if frag != "" {
		for tok := range strings.SplitSeq(strings.TrimPrefix(frag, "/"), "/") {
			tok, err := url.PathUnescape(tok)
			if err != nil {
				return nil
			}
			tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
			switch n := node.(type) {
			case map[string]any:
				node = n[tok]
			case []any:
				i, err := strconv.Atoi(tok)
				if err != nil || i < 0 || i >= len(n) {
					return nil
				}
				node = n[i]
			default:
				return nil
			}
		}
	}
	obj, _ := node.(map[string]any)
	props, _ := obj["properties"].(map[string]any)
	names := make([]string, 0, len(props))
	for name := range props {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// location renders an instance location as a JSON pointer, replacing every
// object key the schema does not declare with "*" so that no instance text
// leaks through a key.
func (w *walker) location(tokens []string) string {
	if len(tokens) == 0 {
		return "/"
	}
	var b strings.Builder
	node := w.instance
	for _, tok := range tokens {
		b.WriteByte('/')
		switch n := node.(type) {
		case []any:
			b.WriteString(tok)
			if i, err := strconv.Atoi(tok); err == nil && i >= 0 && i < len(n) {
				node = n[i]
			} else {
				node = nil
			}
		case map[string]any:
			if w.s.names[tok] {
				b.WriteString(strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1"))
			} else {
				b.WriteByte('*')
			}
			node = n[tok]
		default:
			b.WriteByte('*')
			node = nil
		}
	}
	return b.String()
}

// collectNames gathers every key of every "properties" object and every
// name listed under "required" or "dependentRequired" in a schema document.
func collectNames(v any, names map[string]bool) {
	switch n := v.(type) {
	case map[string]any:
		if props, ok := n["properties"].(map[string]any); ok {
			for k := range props {
				names[k] = true
			}
		}
		if req, ok := n["required"].([]any); ok {
			for _, r := range req {
				if s, ok := r.(string); ok {
					names[s] = true
				}
			}
		}
		for _, key := range []string{"dependentRequired", "dependentSchemas", "dependencies"} {
			if deps, ok := n[key].(map[string]any); ok {
				for k := range deps {
					names[k] = true
				}
			}
		}
		for _, child := range n {
			collectNames(child, names)
		}
	case []any:
		for _, child := range n {
			collectNames(child, names)
		}
	}
}

func keyword(k jsonschema.ErrorKind) string {
	if p := k.KeywordPath(); len(p) > 0 {
		return p[len(p)-1]
	}
	return "validation"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// listJSON lists schema values as compact JSON, at most maxListed of them.
func listJSON(vals []any) string {
	parts := make([]string, 0, min(len(vals), maxListed))
	for i, v := range vals {
		if i == maxListed {
			parts = append(parts, fmt.Sprintf("… (%d more)", len(vals)-maxListed))
			break
		}
		parts = append(parts, compactJSON(v))
	}
	return strings.Join(parts, ", ")
}

func listStrings(vals []string) string {
	as := make([]any, len(vals))
	for i, v := range vals {
		as[i] = v
	}
	return listJSON(as)
}

func compactJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "(unprintable)"
	}
	return string(b)
}

func ratString(r *big.Rat) string {
	if r == nil {
		return "the limit"
	}
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}
