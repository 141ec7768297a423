package fakekit

import "testing"

func TestMinimalInstance(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, schema, want string }{
		{"no schema", ``, `{}`},
		{"not JSON", `{`, `{}`},
		{"required only", `{"type":"object","required":["a"],"properties":{"a":{"type":"string"},"b":{"type":"integer"}}}`, `{"a":"ok"}`},
		{"enum first", `{"enum":["x","y"]}`, `"x"`},
		{"const", `{"const":7}`, `7`},
		{"minLength", `{"type":"string","minLength":4}`, `"oooo"`},
		{"date", `{"type":"string","format":"date"}`, `"2000-01-01"`},
		{"date-time", `{"type":"string","format":"date-time"}`, `"2000-01-01T00:00:00Z"`},
		{"minItems", `{"type":"array","minItems":2,"items":{"type":"boolean"}}`, `[false,false]`},
		{"minimum integer", `{"type":"integer","minimum":2.5}`, `3`},
		{"type list", `{"type":["null","number"]}`, `0`},
		{"OpenAPI upper case", `{"type":"OBJECT","required":["n"],"properties":{"n":{"type":"INTEGER"}}}`, `{"n":0}`},
		{"local ref", `{"$defs":{"f":{"type":"boolean"}},"type":"object","required":["f"],"properties":{"f":{"$ref":"#/$defs/f"}}}`, `{"f":false}`},
		{"anyOf first", `{"anyOf":[{"type":"string"},{"type":"number"}]}`, `"ok"`},
		{"allOf merges objects", `{"allOf":[{"type":"object","required":["a"],"properties":{"a":{"const":1}}},{"type":"object","required":["b"],"properties":{"b":{"const":2}}}]}`, `{"a":1,"b":2}`},
	}
	for _, tt := range tests {
		if got := MinimalInstance([]byte(tt.schema)); got != tt.want {
			t.Errorf("MinimalInstance(%s) = %s, want %s", tt.name, got, tt.want)
		}
	}
}

// Cases that came with the OpenAI fake, which now answers with
// MinimalInstance directly.
func TestMinimalInstanceShapes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, schema, want string
	}{
		{"no schema", ``, `{}`},
		{"enum first value", `{"type":"string","enum":["b","a"]}`, `"b"`},
		{"const", `{"const":"fixed"}`, `"fixed"`},
		{"required only", `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"required":["b"]}`, `{"b":0}`},
		{"nested", `{"type":"object","properties":{"o":{"type":"object","properties":{"x":{"type":"boolean"}},"required":["x"]},"l":{"type":"array","items":{"type":"string"}}},"required":["o","l"]}`, `{"l":[],"o":{"x":false}}`},
		{"minItems", `{"type":"array","minItems":2,"items":{"type":"number"}}`, `[0,0]`},
		{"exclusive minimum", `{"type":"number","exclusiveMinimum":1}`, `2`},
		{"nullable type", `{"type":["null","string"]}`, `"ok"`},
		{"null only", `{"type":"null"}`, `null`},
		{"minimum", `{"type":"integer","minimum":2.5}`, `3`},
		{"local ref", `{"$defs":{"flag":{"type":"string","enum":["x"]}},"type":"object","properties":{"f":{"$ref":"#/$defs/flag"}},"required":["f"]}`, `{"f":"x"}`},
		{"anyOf", `{"anyOf":[{"type":"boolean"},{"type":"string"}]}`, `false`},
		{"recursive ref", `{"$ref":"#"}`, `null`},
	}
	for _, tt := range tests {
		if got := MinimalInstance([]byte(tt.schema)); got != tt.want {
			t.Errorf("MinimalInstance(%s) = %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestAnswer(t *testing.T) {
	t.Parallel()
	schema := []byte(`{"enum":["x"]}`)
	if got := Answer[string](nil, "req", schema); got != `"x"` {
		t.Errorf("Answer(no respond) = %s, want the minimal instance \"x\"", got)
	}
	echo := func(req string) string { return "said " + req }
	if got := Answer(echo, "req", schema); got != "said req" {
		t.Errorf("Answer(respond) = %q, want %q", got, "said req")
	}
}
