package rules

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// checkSchema checks the rules against a profile's JSON Schema: every
// property the defaults or a set name is declared, every value the rules can
// write is allowed by the property's type, enum and const (and its items'
// for arrays), every label is allowed as an item of the labels field, and
// every required property gets a value. It is a static check of what the
// rules file can write, not a full validator: the pipeline still validates
// every output.
func (s *ruleSet) checkSchema(schema []byte) error {
	dec := json.NewDecoder(bytes.NewReader(schema))
	dec.UseNumber()
	var root map[string]any
	if err := dec.Decode(&root); err != nil || root == nil {
		return fmt.Errorf("schema: not a JSON object")
	}
	props, _ := root["properties"].(map[string]any)
	if props == nil {
		return fmt.Errorf("schema: declares no properties")
	}
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	for _, f := range s.fields {
		prop, ok := props[f.name]
		if !ok {
			if f.value != nil {
				add("defaults.%s: not a property of the schema", f.name)
			} else if f.name == s.labelsField {
				add("labels_field %q: not a property of the schema", f.name)
			} else {
				add("rationale_field %q: not a property of the schema", f.name)
			}
			continue
		}
		if f.value != nil {
			if p := checkValue(prop, decode(f.value)); p != "" {
				add("defaults.%s: %s", f.name, p)
			}
		}
	}
	if s.labelsField != "" {
		if prop, ok := props[s.labelsField]; ok {
			if p := checkValue(prop, []any{}); p != "" {
				add("labels_field %q: %s", s.labelsField, p)
			}
			for _, r := range s.rules {
				if p := checkValue(prop, []any{r.label}); p != "" {
					add("rule %q: label: %s", r.id, p)
				}
			}
		}
	}
	if s.rationaleField != "" {
		if prop, ok := props[s.rationaleField]; ok {
			if p := checkValue(prop, "matched: x"); p != "" {
				add("rationale_field %q: %s", s.rationaleField, p)
			}
		}
	}
	for _, r := range s.rules {
		for _, k := range r.setKeys {
			prop, ok := props[k]
			if !ok {
				add("rule %q: set.%s: not a property of the schema", r.id, k)
				continue
			}
			if p := checkValue(prop, decode(r.set[k])); p != "" {
				add("rule %q: set.%s: %s", r.id, k, p)
			}
		}
	}
	if req, ok := root["required"].([]any); ok {
		for _, x := range req {
			name, _ := x.(string)
			if !slices.ContainsFunc(s.fields, func(f field) bool { return f.name == name }) {
				add("required property %q: no default", name)
			}
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("rules do not fit the schema: %s", strings.Join(problems, "; "))
	}
	return nil
}

// checkValue returns why schema does not allow v, or "" if it does (or the
// check cannot tell). Values come from the rules file, so naming them is safe.
func checkValue(schema any, v any) string {
	switch sc := schema.(type) {
	case bool:
		if !sc {
			return "the schema allows no value"
		}
		return ""
	case map[string]any:
		if t, ok := sc["type"]; ok && !typeAllows(t, v) {
			return fmt.Sprintf("is %s, the schema wants %s", jsonType(v), typeString(t))
		}
		if enum, ok := sc["enum"].([]any); ok && !slices.ContainsFunc(enum, func(e any) bool { return sameJSON(e, v) }) {
			return fmt.Sprintf("%s is not one of the schema's enum values", encode(v))
		}
		if c, ok := sc["const"]; ok && !sameJSON(c, v) {
			return fmt.Sprintf("%s is not the schema's const value", encode(v))
		}
		if arr, ok := v.([]any); ok {
			if items, ok := sc["items"]; ok {
				for i, el := range arr {
					if p := checkValue(items, el); p != "" {
						return fmt.Sprintf("[%d]: %s", i, p)
					}
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

func typeString(t any) string {
	if s, ok := t.(string); ok {
		return s
	}
	return encode(t)
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

func decode(raw json.RawMessage) any {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	_ = dec.Decode(&v) // raw was produced by json.Marshal
	return v
}

func encode(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "?"
	}
	return string(b)
}

func sameJSON(a, b any) bool { return encode(a) == encode(b) }
