package processortest

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
)

// QuickstartSchema is the quickstart moderation profile's JSON Schema, as
// a path from a processor/<p> package directory (where its tests run).
// The local processors (rules, azurecs) are tested against it.
const QuickstartSchema = "../../examples/quickstart/profiles/moderation.schema.json"

// Moderation is the output shape of the quickstart moderation profile.
type Moderation struct {
	Category  string   `json:"category"`
	Severity  string   `json:"severity"`
	Action    string   `json:"action"`
	Labels    []string `json:"labels"`
	Rationale string   `json:"rationale"`
}

// DecodeModeration decodes out as a Moderation, failing t when it is not
// one (a field the profile does not have included).
func DecodeModeration(t testing.TB, out []byte) Moderation {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	var got Moderation
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("output %s: %v", out, err)
	}
	return got
}

// ReadFile returns the content of path, failing t when it cannot be read.
func ReadFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
