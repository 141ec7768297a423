package azurecs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// CheckSchema checks the mapping against a profile's JSON Schema: every
// property the defaults or a rule set is declared, every value the mapping
// can write is allowed by that property's type, enum and const (and its
// items' for arrays), every category label is allowed as an item of the
// labels field, the rationale field takes a string, and every required
// property has a default. It is a static check of what the mapping can
// write, not a validator: the pipeline still validates every output.
func (m *Mapping) CheckSchema(schema []byte) error {
	dec := json.NewDecoder(bytes.NewReader(schema))
	dec.UseNumber()
	var root map[string]any
	if err := dec.Decode(&root); err != nil || root == nil {
		return errors.New("schema: not a JSON object")
	}
	props, _ := root["properties"].(map[string]any)
	if props == nil {
		return errors.New("schema: declares no properties")
	}
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	for _, f := range m.fields {
		prop, ok := props[f.name]
		if !ok {
			add("defaults.%s: not a property of the schema", f.name)
			continue
		}
		if p := allows(prop, decodeJSON(f.value)); p != "" {
			add("defaults.%s: %s", f.name, p)
		}
	}
	if prop, ok := props[m.labelsField]; ok && m.labelsField != "" {
		for _, cl := range m.labels {
			if p := allows(prop, []any{cl.label}); p != "" {
				add("category_labels.%s.label: %s", cl.category, p)
			}
		}
	}
	if prop, ok := props[m.rationaleField]; ok && m.rationaleField != "" {
		sample := rationalePrefix + "SelfHarm=6, Hate=4; rules[0]"
		if p := allows(prop, sample); p != "" {
			add("rationale_field %q: %s", m.rationaleField, p)
		}
	}
	for _, r := range m.rules {
		name := fmt.Sprintf("rules[%d]", r.index)
		if r.id != "" {
			name += " (" + r.id + ")"
		}
		for _, f := range r.set {
			if prop, ok := props[f.name]; ok {
				if p := allows(prop, decodeJSON(f.value)); p != "" {
					add("%s.set.%s: %s", name, f.name, p)
				}
			}
		}
	}
	if req, ok := root["required"].([]any); ok {
		for _, x := range req {
			name, _ := x.(string)
			if !slices.ContainsFunc(m.fields, func(f field) bool { return f.name == name }) {
				add("required property %q: no default", name)
			}
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("mapping does not fit the schema: %s", strings.Join(problems, "; "))
	}
	return nil
}

// allows returns why schema does not allow v, or "" if it does or the check
// cannot tell. v comes from the mapping file, so naming it is safe.
func allows(schema any, v any) string {
	sc, ok := schema.(map[string]any)
	if !ok {
		if b, isBool := schema.(bool); isBool && !b {
			return "the schema allows no value"
		}
		return ""
	}
	if t, ok := sc["type"]; ok && !typeAllows(t, v) {
		want := compact(t)
		if s, ok := t.(string); ok {
			want = s
		}
		return fmt.Sprintf("is %s, the schema wants %s", jsonType(v), want)
	}
	if enum, ok := sc["enum"].([]any); ok && !slices.ContainsFunc(enum, func(e any) bool { return compact(e) == compact(v) }) {
		return fmt.Sprintf("%s is not one of the schema's enum values", compact(v))
	}
	if c, ok := sc["const"]; ok && compact(c) != compact(v) {
		return fmt.Sprintf("%s is not the schema's const value", compact(v))
	}
	if arr, ok := v.([]any); ok {
		if items, ok := sc["items"]; ok {
			for i, el := range arr {
				if p := allows(items, el); p != "" {
					return fmt.Sprintf("[%d]: %s", i, p)
				}
			}
		}
	}
	return ""
}

func typeAllows(t any, v any) bool {
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

func decodeJSON(raw json.RawMessage) any {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	_ = dec.Decode(&v) // raw was produced by json.Marshal
	return v
}

// compact encodes v as JSON, for comparison and messages.
func compact(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "?"
	}
	return string(b)
}
