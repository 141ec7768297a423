package schema

import (
	"strconv"
	"strings"
)

// closeObjects returns a copy of doc, a parsed schema document, in which every
// object schema is closed, so that a model output carrying a property the
// profile never declared is invalid (and repaired) instead of being stored
// and delivered. A level that already says what happens to other properties
// ("additionalProperties", "patternProperties" or "unevaluatedProperties",
// with any value) is left as written: that is how a schema asks for an open
// object.
//
// A plain level that declares "properties" or "type": "object" gets
// "additionalProperties": false. Composition needs care, because the members
// of an allOf, anyOf or oneOf, the branches of if/then/else, and the target
// of a "$ref" each see only their own properties: closing them would refuse
// properties another member declares. Those members are left open, and the
// level that composes them is closed with "unevaluatedProperties": false,
// which sees what every member evaluated. Drafts before 2019-09 have no
// unevaluatedProperties; there a composing level stays open.
//
// Conditions ("not", "if", "contains", "propertyNames") are copied as
// written: closing a condition would change what it matches.
func closeObjects(doc any) any {
	root, ok := doc.(map[string]any)
	if !ok {
		return doc
	}
	c := closer{unevaluated: supportsUnevaluated(root), refTargets: map[string]bool{}}
	c.findRefs(root)
	return c.close(root, "#", false)
}

type closer struct {
	unevaluated bool
	// refTargets holds the JSON pointers ("#/$defs/base") that some local
	// "$ref" names.
	refTargets map[string]bool
}

// supportsUnevaluated reports whether the document's draft has the
// unevaluatedProperties keyword. Documents without "$schema" are read as
// draft 2020-12.
func supportsUnevaluated(root map[string]any) bool {
	s, ok := root["$schema"].(string)
	if !ok {
		return true
	}
	return strings.Contains(s, "2019-09") || strings.Contains(s, "2020-12")
}

// applicators are the keywords that apply other schemas to the same instance.
var applicators = []string{"allOf", "anyOf", "oneOf", "then", "else", "dependentSchemas", "$ref", "$dynamicRef"}

// verbatim keywords hold values or conditions; they are copied unchanged.
var verbatim = map[string]bool{
	"const": true, "enum": true, "default": true, "examples": true,
	"not": true, "if": true, "contains": true, "propertyNames": true,
}

func (c *closer) findRefs(v any) {
	switch n := v.(type) {
	case map[string]any:
		if ref, ok := n["$ref"].(string); ok && strings.HasPrefix(ref, "#") {
			c.refTargets[ref] = true
		}
		for _, child := range n {
			c.findRefs(child)
		}
	case []any:
		for _, child := range n {
			c.findRefs(child)
		}
	}
}

// close copies v, which sits at JSON pointer ptr. member is true when v is
// applied in place by its parent (an allOf member, a then branch, ...).
func (c *closer) close(v any, ptr string, member bool) any {
	switch n := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(n)+1)
		for k, child := range n {
			p := ptr + "/" + escapePointer(k)
			switch k {
			case "allOf", "anyOf", "oneOf":
				out[k] = c.closeList(child, p, true)
			case "then", "else":
				out[k] = c.close(child, p, true)
			case "dependentSchemas":
				out[k] = c.closeEach(child, p, true)
			case "properties", "$defs", "definitions", "patternProperties":
				out[k] = c.closeEach(child, p, false)
			case "prefixItems":
				out[k] = c.closeList(child, p, false)
			default:
				if verbatim[k] {
					out[k] = child
				} else {
					out[k] = c.close(child, p, false)
				}
			}
		}
		if declaresOpenness(n) || member || c.refTargets[ptr] {
			return out
		}
		if composes(n) {
			if c.unevaluated {
				out["unevaluatedProperties"] = false
			}
			return out
		}
		if _, ok := n["properties"]; ok || isObjectType(n["type"]) {
			out["additionalProperties"] = false
		}
		return out
	case []any:
		// "items" in drafts before 2020-12 may be a list of schemas.
		return c.closeList(v, ptr, false)
	default:
		return v
	}
}

func (c *closer) closeList(v any, ptr string, member bool) any {
	list, ok := v.([]any)
	if !ok {
		return c.close(v, ptr, member)
	}
	out := make([]any, len(list))
	for i, child := range list {
		out[i] = c.close(child, ptr+"/"+strconv.Itoa(i), member)
	}
	return out
}

// closeEach closes every schema in a name-to-schema map such as
// "properties" or "$defs".
func (c *closer) closeEach(v any, ptr string, member bool) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	out := make(map[string]any, len(m))
	for name, child := range m {
		out[name] = c.close(child, ptr+"/"+escapePointer(name), member)
	}
	return out
}

// declaresOpenness reports whether the schema object already says what
// happens to properties it does not list.
func declaresOpenness(m map[string]any) bool {
	for _, k := range []string{"additionalProperties", "patternProperties", "unevaluatedProperties"} {
		if _, ok := m[k]; ok {
			return true
		}
	}
	return false
}

func composes(m map[string]any) bool {
	for _, k := range applicators {
		if _, ok := m[k]; ok {
			return true
		}
	}
	return false
}

func isObjectType(t any) bool {
	switch t := t.(type) {
	case string:
		return t == "object"
	case []any:
		for _, e := range t {
			if e == "object" {
				return true
			}
		}
	}
	return false
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
