package processor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/stetlabs/stet"
)

// CheckParamsSchema returns the error an LLM adapter's Extract gives,
// before any call, for params whose schema is missing or not JSON: a
// *stet.ProcessorError, unsupported, code invalid_schema. It is nil for a
// schema that is JSON.
func CheckParamsSchema(schema json.RawMessage) error {
	if len(schema) == 0 || !json.Valid(schema) {
		return &stet.ProcessorError{
			Class: stet.FailureUnsupported,
			Code:  "invalid_schema",
			Err:   errors.New("extract params carry no valid JSON schema"),
		}
	}
	return nil
}

// SchemaCheck is a static check of what a deterministic adapter (a mapping,
// a rules file) can write against a profile's JSON Schema: it reads the
// schema's properties and required list and collects the problems found.
// It is not a validator: the pipeline still validates every output. The
// values it names come from the adapter's own file, so naming them is safe.
type SchemaCheck struct {
	// Properties is the schema's properties object.
	Properties map[string]any
	// Required is the schema's required list; an entry that is not a
	// string is "".
	Required []string
	problems []string
}

// NewSchemaCheck reads schema, which must be a JSON object declaring
// properties.
func NewSchemaCheck(schema []byte) (*SchemaCheck, error) {
	dec := json.NewDecoder(bytes.NewReader(schema))
	dec.UseNumber()
	var root map[string]any
	if err := dec.Decode(&root); err != nil || root == nil {
		return nil, errors.New("schema: not a JSON object")
	}
	props, _ := root["properties"].(map[string]any)
	if props == nil {
		return nil, errors.New("schema: declares no properties")
	}
	c := &SchemaCheck{Properties: props}
	if req, ok := root["required"].([]any); ok {
		for _, x := range req {
			name, _ := x.(string)
			c.Required = append(c.Required, name)
		}
	}
	return c, nil
}

// Addf records a problem.
func (c *SchemaCheck) Addf(format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

// Value checks that property name allows v and records "where: why" when it
// does not. It reports whether the schema declares name; an undeclared
// property is left to the caller.
func (c *SchemaCheck) Value(where, name string, v any) (declared bool) {
	prop, ok := c.Properties[name]
	if !ok {
		return false
	}
	if p := SchemaAllows(prop, v); p != "" {
		c.Addf("%s: %s", where, p)
	}
	return true
}

// RequireDefaults records every required property for which has is false.
func (c *SchemaCheck) RequireDefaults(has func(name string) bool) {
	for _, name := range c.Required {
		if !has(name) {
			c.Addf("required property %q: no default", name)
		}
	}
}

// Err returns the problems found as one error starting with what ("rules do
// not fit the schema"), or nil.
func (c *SchemaCheck) Err(what string) error {
	if len(c.problems) == 0 {
		return nil
	}
	return fmt.Errorf("%s: %s", what, strings.Join(c.problems, "; "))
}

// SchemaAllows returns why the JSON Schema schema does not allow v, or ""
// if it does or the check cannot tell. It reads type, enum, const and, for
// an array, items; v is a value as DecodeJSON gives it.
func SchemaAllows(schema, v any) string {
	switch sc := schema.(type) {
	case bool:
		if !sc {
			return "the schema allows no value"
		}
	case map[string]any:
		if t, ok := sc["type"]; ok && !typeAllows(t, v) {
			want := EncodeJSON(t)
			if s, ok := t.(string); ok {
				want = s
			}
			return fmt.Sprintf("is %s, the schema wants %s", jsonType(v), want)
		}
		if enum, ok := sc["enum"].([]any); ok && !slices.ContainsFunc(enum, func(e any) bool { return EncodeJSON(e) == EncodeJSON(v) }) {
			return fmt.Sprintf("%s is not one of the schema's enum values", EncodeJSON(v))
		}
		if c, ok := sc["const"]; ok && EncodeJSON(c) != EncodeJSON(v) {
			return fmt.Sprintf("%s is not the schema's const value", EncodeJSON(v))
		}
		if arr, ok := v.([]any); ok {
			if items, ok := sc["items"]; ok {
				for i, el := range arr {
					if p := SchemaAllows(items, el); p != "" {
						return fmt.Sprintf("[%d]: %s", i, p)
					}
				}
			}
		}
	}
	return ""
}

func typeAllows(t, v any) bool {
	got := jsonType(v)
	ok := func(want string) bool { return want == got || (want == "number" && got == "integer") }
	switch t := t.(type) {
	case string:
		return ok(t)
	case []any:
		return slices.ContainsFunc(t, func(x any) bool { s, _ := x.(string); return ok(s) })
	}
	return true
}

func jsonType(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number:
		if strings.ContainsAny(v.String(), ".eE") {
			return "number"
		}
		return "integer"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "unknown"
}

// DecodeJSON decodes raw, numbers as json.Number, for SchemaAllows. raw is
// JSON the caller produced; a value that does not decode is nil.
func DecodeJSON(raw json.RawMessage) any {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	_ = dec.Decode(&v)
	return v
}

// EncodeJSON encodes v as compact JSON, for comparisons and messages; "?"
// if it cannot.
func EncodeJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "?"
	}
	return string(b)
}
