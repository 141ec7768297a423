package schema

import (
	"encoding/json"
	"slices"
	"testing"
)

const discharge = `{"type":"object","additionalProperties":false,
	"properties":{"diagnosis":{"type":"string"},"medications":{"type":"array","items":{"type":"string"}},"allergies":{"type":"array","items":{"type":"string"}}},
	"required":["diagnosis","medications","allergies"],
	"if":{"properties":{"diagnosis":{"const":"none"}}},"then":{"properties":{"medications":{"maxItems":0}}}}`

func TestProperties(t *testing.T) {
	got, err := Properties([]byte(discharge))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"diagnosis", "medications", "allergies"}; !slices.Equal(got, want) {
		t.Fatalf("Properties = %q, want %q", got, want)
	}
}

func TestSub(t *testing.T) {
	sub, err := Sub([]byte(discharge), []string{"allergies", "medications"})
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(sub, &top); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"if", "then"} {
		if _, ok := top[k]; ok {
			t.Errorf("sub-schema keeps %q, which relates fields to each other", k)
		}
	}
	names, _ := Properties(sub)
	if want := []string{"allergies", "medications"}; !slices.Equal(names, want) {
		t.Errorf("sub-schema properties = %q, want %q", names, want)
	}
	var req []string
	_ = json.Unmarshal(top["required"], &req)
	if want := []string{"medications", "allergies"}; !slices.Equal(req, want) {
		t.Errorf("required = %q, want %q", req, want)
	}
	s, err := Compile("sub", sub)
	if err != nil {
		t.Fatal(err)
	}
	if p := s.Validate([]byte(`{"medications":["x"],"allergies":[]}`)); len(p) != 0 {
		t.Errorf("a valid part output: %q", p)
	}
	if p := s.Validate([]byte(`{"medications":["x"],"allergies":[],"diagnosis":"y"}`)); len(p) == 0 {
		t.Error("another part's field passed a closed sub-schema")
	}
	if _, err := Sub([]byte(discharge), []string{"nope"}); err == nil {
		t.Error("a field the schema lacks made a sub-schema")
	}
}
