package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// Properties returns the names of a schema document's top-level
// properties, in the order the document lists them.
func Properties(doc []byte) ([]string, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(doc, &top); err != nil {
		return nil, fmt.Errorf("schema: not a JSON object: %w", err)
	}
	props, ok := top["properties"]
	if !ok {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(props))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("schema: properties is not an object")
	}
	var names []string
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("schema: properties: %w", err)
		}
		names = append(names, t.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, fmt.Errorf("schema: properties: %w", err)
		}
	}
	return names, nil
}

// crossField are the top-level keywords that can relate one property to
// another, or count them: a part's sub-schema leaves them out, and the
// merged object is checked against them with the whole schema.
var crossField = []string{"allOf", "anyOf", "oneOf", "not", "if", "then", "else",
	"dependentRequired", "dependentSchemas", "dependencies", "minProperties", "maxProperties"}

// Sub returns the sub-schema of doc for some of its top-level properties
// (docs/design.md §16): their property schemas, "required" narrowed to
// them, and every other top-level keyword kept (definitions, type,
// additionalProperties) except those relating properties to each other.
func Sub(doc []byte, fields []string) (json.RawMessage, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(doc, &top); err != nil {
		return nil, fmt.Errorf("schema: not a JSON object: %w", err)
	}
	var props map[string]json.RawMessage
	if err := json.Unmarshal(top["properties"], &props); err != nil && top["properties"] != nil {
		return nil, errors.New("schema: properties is not an object")
	}
	// The properties in the order fields gives: encoding/json sorts a map's
	// keys, so the object is written by hand.
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range fields {
		p, ok := props[f]
		if !ok {
			return nil, fmt.Errorf("schema: no top-level property %q", f)
		}
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(f)
		b.Write(k)
		b.WriteByte(':')
		b.Write(p)
	}
	b.WriteByte('}')
	top["properties"] = b.Bytes()
	var required []string
	if r, ok := top["required"]; ok {
		if err := json.Unmarshal(r, &required); err != nil {
			return nil, errors.New("schema: required is not a list of names")
		}
		required = slices.DeleteFunc(required, func(n string) bool { return !slices.Contains(fields, n) })
		top["required"], _ = json.Marshal(required)
	}
	for _, k := range crossField {
		delete(top, k)
	}
	return json.Marshal(top)
}
