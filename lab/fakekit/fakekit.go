// Package fakekit is the scaffolding every wire-faithful provider fake
// (processor/<p>/<p>fake) shares, written once: the server's lifecycle and
// waits (Server), a scripted fault queue with reproducible random faults
// (Faults), call counting with the user text kept for CallsContaining
// (Calls), latency draws on their own seeded stream (Latency), traffic
// counted by second and by status (Traffic, StatusWriter), continuously
// refilling RPM/TPM buckets (Bucket), the default answer built from a
// request's JSON schema unless the test scripts one (MinimalInstance,
// Answer), the OpenAI-style chat request the
// chat fakes decode alike (ChatRequest, DecodeChat) and the user text they
// record (UserText), counters read and bumped under the fake's lock
// (Snapshot, Bump), and the small wire helpers (Marshal, Cut, MergeHeader,
// request IDs).
//
// What a provider says — its routes, headers, error bodies, fault kinds — is
// not here: it stays in the provider's fake. fakekit imports only the
// standard library (time comes in as a func() time.Time), so every fake may
// share it without depending on another fake or on stet. It must never be
// used to answer real traffic: Calls keeps the text it is given.
package fakekit

import (
	"encoding/json"
	"math"
	"strings"
)

// Answer is the content of a fake's normal answer to req: what respond
// (the fake's Options.Respond) says, or MinimalInstance(schema) when the
// fake was given none.
func Answer[R any](respond func(R) string, req R, schema json.RawMessage) string {
	if respond != nil {
		return respond(req)
	}
	return MinimalInstance(schema)
}

// MinimalInstance returns the smallest JSON document a fake considers
// valid against schema: every required property of an object, the first
// enum or const value, "ok" for a string (minLength honoured; a date for
// format date or date-time), [] for an array (minItems honoured), 0 or the
// minimum for a number, false for a boolean. Local $ref, anyOf and oneOf
// follow their first branch; allOf merges its object branches. "type" may
// be a list (its first non-null type) or an OpenAPI upper-case name. No
// schema gives {}.
func MinimalInstance(schema json.RawMessage) string {
	var root any
	if len(schema) == 0 || json.Unmarshal(schema, &root) != nil {
		return "{}"
	}
	return string(marshal(minimal(root, root, 0)))
}

func minimal(s, root any, depth int) any {
	m, ok := s.(map[string]any)
	if !ok || depth > 32 {
		return nil
	}
	if ref, ok := m["$ref"].(string); ok {
		return minimal(resolveRef(root, ref), root, depth+1)
	}
	if v, ok := m["const"]; ok {
		return v
	}
	if enum, ok := m["enum"].([]any); ok && len(enum) > 0 {
		return enum[0]
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if branches, ok := m[k].([]any); ok && len(branches) > 0 {
			return minimal(branches[0], root, depth+1)
		}
	}
	if branches, ok := m["allOf"].([]any); ok && len(branches) > 0 {
		merged := map[string]any{}
		for _, b := range branches {
			v := minimal(b, root, depth+1)
			obj, isObj := v.(map[string]any)
			if !isObj {
				return v
			}
			for k, x := range obj {
				merged[k] = x
			}
		}
		return merged
	}
	typ := ""
	switch t := m["type"].(type) {
	case string:
		typ = strings.ToLower(t)
	case []any:
		for _, v := range t {
			if s, ok := v.(string); ok && !strings.EqualFold(s, "null") {
				typ = strings.ToLower(s)
				break
			}
		}
	}
	if typ == "" {
		switch {
		case m["properties"] != nil:
			typ = "object"
		case m["items"] != nil:
			typ = "array"
		}
	}
	switch typ {
	case "object":
		out := map[string]any{}
		props, _ := m["properties"].(map[string]any)
		req, _ := m["required"].([]any)
		for _, r := range req {
			if name, ok := r.(string); ok {
				out[name] = minimal(props[name], root, depth+1)
			}
		}
		return out
	case "array":
		n, _ := m["minItems"].(float64)
		out := make([]any, 0, int(n))
		for range int(n) {
			out = append(out, minimal(m["items"], root, depth+1))
		}
		return out
	case "string":
		switch m["format"] {
		case "date":
			return "2000-01-01"
		case "date-time":
			return "2000-01-01T00:00:00Z"
		}
		n, _ := m["minLength"].(float64)
		if n > 2 {
			return strings.Repeat("o", int(n))
		}
		return "ok"
	case "number", "integer":
		v := 0.0
		if lo, ok := m["minimum"].(float64); ok && lo > v {
			v = lo
		}
		if lo, ok := m["exclusiveMinimum"].(float64); ok && lo >= v {
			v = lo + 1
		}
		if typ == "integer" {
			v = math.Ceil(v)
		}
		return v
	case "boolean":
		return false
	default:
		return nil
	}
}

// resolveRef follows a local JSON pointer ("#/$defs/flag").
func resolveRef(root any, ref string) any {
	if !strings.HasPrefix(ref, "#") {
		return nil
	}
	cur := root
	for _, tok := range strings.Split(strings.TrimPrefix(ref, "#"), "/") {
		if tok == "" {
			continue
		}
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[tok]
	}
	return cur
}

func marshal(v any) []byte {
	b, err := encode(v, "")
	if err != nil {
		return []byte("{}")
	}
	return b
}
