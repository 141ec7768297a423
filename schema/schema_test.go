package schema

import (
	"slices"
	"strings"
	"testing"
)

const moderation = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["category", "severity", "summary"],
  "properties": {
    "category": {"enum": ["harassment", "self-harm", "none"]},
    "severity": {"type": "integer", "minimum": 0, "maximum": 3},
    "summary": {"type": "string", "maxLength": 40},
    "code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
    "extra": {"type": "object", "additionalProperties": {"type": "integer"}}
  }
}`

func mustCompile(t *testing.T, doc string) *Schema {
	t.Helper()
	s, err := Compile("test", []byte(doc))
	if err != nil {
		t.Fatalf("Compile(test) = %v", err)
	}
	return s
}

func TestValidate(t *testing.T) {
	t.Parallel()
	s := mustCompile(t, moderation)
	tests := []struct {
		name     string
		instance string
		want     []string
	}{
		{"valid", `{"category": "none", "severity": 0, "summary": "ok"}`, nil},
		{"valid with optional", `{"category": "harassment", "severity": 3, "summary": "x", "code": "ABC-12", "tags": ["a"]}`, nil},
		{"not JSON", `{"category": `, []string{"not valid JSON"}},
		{"trailing data", `{} {}`, []string{"not valid JSON"}},
		{"missing", `{"category": "none"}`, []string{`/: missing required properties "severity", "summary"`}},
		{"wrong type", `{"category": "none", "severity": "high", "summary": "x"}`, []string{"/severity: must be integer (got string)"}},
		{"enum", `{"category": "spam", "severity": 1, "summary": "x"}`, []string{`/category: value must be one of "harassment", "self-harm", "none"`}},
		{"maximum", `{"category": "none", "severity": 7, "summary": "x"}`, []string{"/severity: must be at most 3"}},
		{"max items", `{"category": "none", "severity": 1, "summary": "x", "tags": ["a", "b", "c"]}`, []string{"/tags: must have at most 2 items (got 3)"}},
		{"item type", `{"category": "none", "severity": 1, "summary": "x", "tags": ["a", 5]}`, []string{"/tags/1: must be string (got number)"}},
		{"additional", `{"category": "none", "severity": 1, "summary": "x", "note": "y"}`,
			[]string{`/: has a property the schema does not allow; allowed: "category", "code", "extra", "severity", "summary", "tags"`}},
		{"undeclared key in location", `{"category": "none", "severity": 1, "summary": "x", "extra": {"anything": "y"}}`,
			[]string{"/extra/*: must be integer (got string)"}},
		{"several", `{"category": 1, "severity": -1, "summary": "x"}`, []string{
			`/category: value must be one of "harassment", "self-harm", "none"`,
			"/severity: must be at least 0",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := s.Validate([]byte(tt.instance))
			if !slices.Equal(got, tt.want) {
				t.Errorf("Validate(%s) = %q, want %q", tt.instance, got, tt.want)
			}
		})
	}
}

func TestValidateKinds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		schema, instance, want string
	}{
		{`{"const": "x"}`, `"y"`, `/: value must be "x"`},
		{`{"type": "string", "minLength": 3}`, `"ab"`, "/: must be at least 3 characters long (got 2)"},
		{`{"exclusiveMinimum": 1.5}`, `1`, "/: must be greater than 1.5"},
		{`{"multipleOf": 5}`, `7`, "/: must be a multiple of 5"},
		{`{"not": {"type": "null"}}`, `null`, `/: must not match the schema in "not"`},
		{`{"uniqueItems": true}`, `[1, 1]`, "/: items 0 and 1 are equal; items must be unique"},
		{`{"contains": {"type": "integer"}}`, `["a"]`, "/: must contain at least one matching item (contains)"},
		{`{"propertyNames": {"maxLength": 2}}`, `{"abc": 1}`, "/: has a property name that the schema does not allow (propertyNames)"},
		{`{"prefixItems": [{"type": "integer"}], "items": false}`, `[1, 2]`, "/1: is not allowed here"},
		{`{"dependentRequired": {"a": ["b"]}}`, `{"a": 1}`, `/: property "a" requires "b"`},
		{`{"oneOf": [{"type": "integer"}, {"type": "number"}]}`, `1`, "/: must match exactly one alternative (oneOf) but matches alternatives 0 and 1"},
		{`{"$defs": {"n": {"type": "integer"}}, "properties": {"a": {"$ref": "#/$defs/n"}}}`, `{"a": "x"}`, "/a: must be integer (got string)"},
		{`{"$schema": "http://json-schema.org/draft-07/schema#", "items": [{"type": "string"}], "additionalItems": false}`, `["a", "b"]`, "/: has 1 more items than the schema allows"},
	}
	for _, tt := range tests {
		s := mustCompile(t, tt.schema)
		got := s.Validate([]byte(tt.instance))
		if !slices.Contains(got, tt.want) {
			t.Errorf("schema %s: Validate(%s) = %q, want it to contain %q", tt.schema, tt.instance, got, tt.want)
		}
	}
}

func TestValidateAnyOfNamesAlternatives(t *testing.T) {
	t.Parallel()
	s := mustCompile(t, `{"properties": {"v": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}}`)
	got := s.Validate([]byte(`{"v": "x"}`))
	want := []string{
		"/v: must be integer (got string)",
		"/v: must be null (got string)",
		"/v: must match at least one of the allowed alternatives (anyOf)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Validate = %q, want %q", got, want)
	}
}

// TestValidateNeverQuotesInstance proves that text from the instance — a
// value or a key the schema does not declare — never reaches a problem line.
func TestValidateNeverQuotesInstance(t *testing.T) {
	t.Parallel()
	const canary = "CANARY-7f3a-patient-Smith"
	s := mustCompile(t, `{
	  "type": "object",
	  "additionalProperties": false,
	  "properties": {
	    "summary": {"type": "string", "maxLength": 5},
	    "code": {"type": "string", "pattern": "^[0-9]+$"},
	    "category": {"enum": ["a", "b"]},
	    "severity": {"type": "integer"},
	    "date": {"type": "string", "format": "date"},
	    "fixed": {"const": "x"},
	    "map": {"type": "object", "additionalProperties": {"type": "integer"}},
	    "names": {"type": "object", "propertyNames": {"pattern": "^[a-z]+$"}},
	    "list": {"type": "array", "items": {"type": "integer"}}
	  }
	}`)
	tests := []struct{ name, instance string }{
		{"string too long", `{"summary": "` + canary + `"}`},
		{"pattern mismatch", `{"code": "` + canary + `"}`},
		{"enum mismatch", `{"category": "` + canary + `"}`},
		{"wrong type", `{"severity": "` + canary + `"}`},
		{"const mismatch", `{"fixed": "` + canary + `"}`},
		{"additional property value", `{"note": "` + canary + `"}`},
		{"additional property name", `{"` + canary + `": 1}`},
		{"undeclared key on the path", `{"map": {"` + canary + `": "x"}}`},
		{"property name", `{"names": {"` + canary + `": 1}}`},
		{"array item", `{"list": [1, "` + canary + `"]}`},
		{"whole document", `"` + canary + `"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := s.Validate([]byte(tt.instance))
			if len(got) == 0 {
				t.Fatalf("Validate(%s) = nil, want problems", tt.instance)
			}
			for _, p := range got {
				if strings.Contains(p, canary) || strings.Contains(p, "Smith") {
					t.Errorf("Validate(%s) problem %q quotes the instance", tt.instance, p)
				}
			}
		})
	}
}

func TestValidateCapsProblems(t *testing.T) {
	t.Parallel()
	s := mustCompile(t, `{"type": "array", "items": {"type": "integer"}}`)
	items := make([]string, 200)
	for i := range items {
		items[i] = `"x"`
	}
	got := s.Validate([]byte("[" + strings.Join(items, ",") + "]"))
	if len(got) != maxProblems+1 || !strings.Contains(got[maxProblems], "150 more") {
		t.Errorf("Validate(200 bad items) returned %d lines ending %q, want %d lines ending with 150 more", len(got), got[len(got)-1], maxProblems+1)
	}
}

func TestCompileRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, doc, want string
	}{
		{"not JSON", `{"type": `, "not valid JSON"},
		{"type not a string", `{"type": 12}`, "not a valid schema"},
		{"unknown type name", `{"type": "integr"}`, "not a valid schema"},
		{"bad pattern", `{"pattern": "("}`, "not a valid schema"},
		{"file reference", `{"$ref": "file:///etc/passwd"}`, "not a valid schema"},
		{"remote reference", `{"$ref": "https://example.com/s.json"}`, "not a valid schema"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Compile("bad", []byte(tt.doc))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Compile(%s) = %v, want an error containing %q", tt.doc, err, tt.want)
			}
		})
	}
}

func TestCompileHonoursDraft(t *testing.T) {
	t.Parallel()
	// In draft-04 exclusiveMaximum is a boolean; in 2020-12 it is a number.
	if _, err := Compile("d4", []byte(`{"$schema": "http://json-schema.org/draft-04/schema#", "maximum": 3, "exclusiveMaximum": true}`)); err != nil {
		t.Errorf("Compile(draft-04 schema) = %v, want nil", err)
	}
	if _, err := Compile("d2020", []byte(`{"maximum": 3, "exclusiveMaximum": true}`)); err == nil {
		t.Errorf("Compile(boolean exclusiveMaximum without $schema) = nil, want an error (2020-12 default)")
	}
}

func TestJSON(t *testing.T) {
	t.Parallel()
	doc := []byte(`{"type": "string"}`)
	s, err := Compile("s", doc)
	if err != nil {
		t.Fatal(err)
	}
	doc[2] = 'X' // the schema keeps its own copy
	if got := string(s.JSON()); got != `{"type": "string"}` {
		t.Errorf("JSON() = %s, want the original document", got)
	}
}

// TestValidateClosesObjects checks that a property the schema does not
// declare is a problem unless that level of the schema leaves objects open,
// and that closing never refuses a property a composed member declares.
func TestValidateClosesObjects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, schema, instance string
		valid                  bool
	}{
		{"declared only", `{"type": "object", "properties": {"a": {}}}`, `{"a": 1}`, true},
		{"undeclared", `{"type": "object", "properties": {"a": {}}}`, `{"a": 1, "b": 2}`, false},
		{"object without properties", `{"type": "object"}`, `{"b": 2}`, false},
		{"nested", `{"properties": {"a": {"type": "object", "properties": {"x": {}}}}}`, `{"a": {"x": 1, "y": 2}}`, false},
		{"array items", `{"type": "array", "items": {"properties": {"x": {}}}}`, `[{"x": 1}, {"y": 2}]`, false},
		{"explicitly open", `{"properties": {"a": {}}, "additionalProperties": true}`, `{"a": 1, "b": 2}`, true},
		{"typed additional", `{"additionalProperties": {"type": "integer"}}`, `{"b": 2}`, true},
		{"pattern properties", `{"properties": {"a": {}}, "patternProperties": {"^x-": {}}}`, `{"a": 1, "x-b": 2}`, true},
		{"allOf members", `{"allOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}]}`, `{"a": 1, "b": 2}`, true},
		{"allOf undeclared", `{"allOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}]}`, `{"a": 1, "b": 2, "c": 3}`, false},
		{"ref beside properties", `{"$defs": {"base": {"properties": {"a": {}}}}, "$ref": "#/$defs/base", "properties": {"b": {}}}`, `{"a": 1, "b": 2}`, true},
		{"ref beside properties undeclared", `{"$defs": {"base": {"properties": {"a": {}}}}, "$ref": "#/$defs/base", "properties": {"b": {}}}`, `{"a": 1, "c": 3}`, false},
		{"ref as a property", `{"$defs": {"addr": {"properties": {"city": {}}}}, "properties": {"home": {"$ref": "#/$defs/addr"}}}`, `{"home": {"city": "x", "zip": "y"}}`, false},
		{"anyOf alternative", `{"anyOf": [{"properties": {"a": {}}, "required": ["a"]}, {"properties": {"b": {}}, "required": ["b"]}]}`, `{"a": 1, "c": 3}`, false},
		{"anyOf declared", `{"anyOf": [{"properties": {"a": {}}, "required": ["a"]}, {"properties": {"b": {}}, "required": ["b"]}]}`, `{"b": 1}`, true},
		{"if then", `{"properties": {"kind": {}}, "if": {"properties": {"kind": {"const": "x"}}}, "then": {"properties": {"x": {}}}}`, `{"kind": "x", "x": 1}`, true},
		{"not is a condition", `{"properties": {"a": {}}, "not": {"properties": {"a": {"const": 1}}}}`, `{"a": 2}`, true},
		{"draft-07 allOf stays open", `{"$schema": "http://json-schema.org/draft-07/schema#", "allOf": [{"properties": {"a": {}}}]}`, `{"a": 1, "b": 2}`, true},
		{"draft-07 plain level closed", `{"$schema": "http://json-schema.org/draft-07/schema#", "properties": {"a": {}}}`, `{"a": 1, "b": 2}`, false},
		{"enum values untouched", `{"enum": [{"a": 1, "b": 2}]}`, `{"a": 1, "b": 2}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := mustCompile(t, tt.schema)
			got := s.Validate([]byte(tt.instance))
			if (got == nil) != tt.valid {
				t.Fatalf("Validate(%s) = %q, want valid=%v", tt.instance, got, tt.valid)
			}
			for _, line := range got {
				for _, leak := range []string{`"b"`, `"c"`, `"y"`, `"zip"`} {
					if strings.Contains(line, leak) {
						t.Errorf("problem %q names the undeclared property %s", line, leak)
					}
				}
			}
		})
	}
	s := mustCompile(t, `{"type": "object", "properties": {"a": {}}}`)
	want := []string{`/: has a property the schema does not allow; allowed: "a"`}
	if got := s.Validate([]byte(`{"a": 1, "b": 2}`)); !slices.Equal(got, want) {
		t.Errorf("Validate = %q, want %q", got, want)
	}
	s2 := mustCompile(t, `{"allOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}]}`)
	want = []string{"/: has a property the schema does not allow"}
	if got := s2.Validate([]byte(`{"a": 1, "c": 3}`)); !slices.Equal(got, want) {
		t.Errorf("Validate(allOf) = %q, want %q", got, want)
	}
	if got := string(s.JSON()); strings.Contains(got, "additionalProperties") {
		t.Errorf("JSON() = %s; want the document as written", got)
	}
}
