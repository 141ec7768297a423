package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// A profile's JSON schema, rendered field by field: an enum is a <select>,
// an array of enums a set of checkboxes, a string a text area, a number a
// number input, a boolean a checkbox. A field of any other shape is edited
// as JSON. What the form sends is validated against the schema again on
// the server (api.Server.Decide).

// field is one top-level property of a profile's schema.
type field struct {
	Name        string
	Kind        string // enum | enums | string | number | integer | boolean | json
	Description string
	Required    bool
	Options     []string
}

// fieldValue is a field with a record's value, for display and the form.
type fieldValue struct {
	field
	Value    string          // enum, string, number: the value as text
	Selected map[string]bool // enums: the checked options
	Present  bool
}

// Input names the form input of the field.
func (f field) Input() string { return "f." + f.Name }

type schemaDoc struct {
	Properties json.RawMessage `json:"properties"`
	Required   []string        `json:"required"`
}

type propDoc struct {
	Type        any      `json:"type"`
	Enum        []any    `json:"enum"`
	Description string   `json:"description"`
	Items       *propDoc `json:"items"`
}

// schemaFields lists a schema's top-level properties in the order the
// schema declares them.
func schemaFields(schema []byte) ([]field, error) {
	var doc schemaDoc
	if err := json.Unmarshal(schema, &doc); err != nil {
		return nil, err
	}
	names, err := objectKeys(doc.Properties)
	if err != nil {
		return nil, err
	}
	var props map[string]propDoc
	if err := json.Unmarshal(doc.Properties, &props); err != nil {
		return nil, err
	}
	var out []field
	for _, n := range names {
		p := props[n]
		f := field{Name: n, Description: p.Description, Required: slices.Contains(doc.Required, n), Kind: "json"}
		switch t := typeOf(p.Type); {
		case len(p.Enum) > 0 && allStrings(p.Enum):
			f.Kind, f.Options = "enum", strs(p.Enum)
		case t == "array" && p.Items != nil && len(p.Items.Enum) > 0 && allStrings(p.Items.Enum):
			f.Kind, f.Options = "enums", strs(p.Items.Enum)
		case t == "string", t == "number", t == "integer", t == "boolean":
			f.Kind = t
		}
		out = append(out, f)
	}
	return out, nil
}

// objectKeys returns a JSON object's keys in document order.
func objectKeys(obj json.RawMessage) ([]string, error) {
	if len(obj) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(obj))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("schema properties: not an object")
	}
	var keys []string
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		keys = append(keys, t.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

func typeOf(t any) string {
	switch v := t.(type) {
	case string:
		return v
	case []any: // ["string", "null"]: the first non-null type
		for _, x := range v {
			if s, ok := x.(string); ok && s != "null" {
				return s
			}
		}
	}
	return ""
}

func allStrings(vs []any) bool {
	for _, v := range vs {
		if _, ok := v.(string); !ok {
			return false
		}
	}
	return true
}

func strs(vs []any) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.(string)
	}
	return out
}

// withValues pairs each field with its value in classification (null or
// absent: no value).
func withValues(fields []field, classification json.RawMessage) []fieldValue {
	var obj map[string]json.RawMessage
	_ = json.Unmarshal(classification, &obj)
	out := make([]fieldValue, len(fields))
	for i, f := range fields {
		fv := fieldValue{field: f, Selected: map[string]bool{}}
		raw, ok := obj[f.Name]
		fv.Present = ok
		if ok {
			switch f.Kind {
			case "enum", "string":
				var s string
				if json.Unmarshal(raw, &s) == nil {
					fv.Value = s
				} else {
					fv.Value = string(raw)
				}
			case "enums":
				var ss []string
				_ = json.Unmarshal(raw, &ss)
				for _, s := range ss {
					fv.Selected[s] = true
				}
				fv.Value = strings.Join(ss, ", ")
			default:
				fv.Value = string(raw)
			}
		}
		out[i] = fv
	}
	return out
}

// classificationFrom builds a classification from a decision form. An
// empty choice leaves its field out, so the schema check names it.
func classificationFrom(fields []field, form url.Values) (json.RawMessage, string) {
	obj := map[string]any{}
	for _, f := range fields {
		v := form.Get(f.Input())
		switch f.Kind {
		case "enum":
			if v != "" {
				obj[f.Name] = v
			}
		case "enums":
			vals := []string{}
			for _, o := range f.Options { // in the schema's order
				if slices.Contains(form[f.Input()], o) {
					vals = append(vals, o)
				}
			}
			obj[f.Name] = vals
		case "string":
			obj[f.Name] = v
		case "number", "integer":
			if v == "" {
				continue
			}
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return nil, f.Name + " must be a number"
			}
			obj[f.Name] = n
		case "boolean":
			obj[f.Name] = v == "true"
		default:
			if strings.TrimSpace(v) == "" {
				continue
			}
			if !json.Valid([]byte(v)) {
				return nil, f.Name + " must be JSON"
			}
			obj[f.Name] = json.RawMessage(v)
		}
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, "the classification could not be built"
	}
	return b, ""
}
