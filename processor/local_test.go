package processor

import (
	"errors"
	"testing"

	"github.com/stetlabs/stet"
)

func TestSchemaFitsChecksEachSchemaOnce(t *testing.T) {
	t.Parallel()
	var fits SchemaFits
	errMisfit := errors.New("misfit")
	calls := map[string]int{}
	check := func(schema []byte) error {
		calls[string(schema)]++
		if string(schema) == `{"bad":true}` {
			return errMisfit
		}
		return nil
	}
	for range 3 {
		if err := fits.Check([]byte(`{"type":"object"}`), check); err != nil {
			t.Fatalf("Check(good) = %v, want nil", err)
		}
		if err := fits.Check([]byte(`{"bad":true}`), check); !errors.Is(err, errMisfit) {
			t.Fatalf("Check(bad) = %v, want the check's error every time", err)
		}
	}
	if len(calls) != 2 || calls[`{"type":"object"}`] != 1 || calls[`{"bad":true}`] != 1 {
		t.Errorf("checks run = %v, want each schema checked once", calls)
	}
	if n := fits.Len(); n != 2 {
		t.Errorf("Len() = %d, want 2", n)
	}
}

func TestObjectJSON(t *testing.T) {
	t.Parallel()
	names := []string{"z", "a", `q"`}
	values := [][]byte{[]byte(`1`), MustJSON("x<y"), []byte(`null`)}
	got := ObjectJSON(len(names), func(i int) (string, []byte) { return names[i], values[i] })
	if want := `{"z":1,"a":"x\u003cy","q\"":null}`; string(got) != want {
		t.Errorf("ObjectJSON = %s, want %s (fields in order)", got, want)
	}
	if got := ObjectJSON(0, nil); string(got) != `{}` {
		t.Errorf("ObjectJSON(0) = %s, want {}", got)
	}
}

func TestCheckParamsSchema(t *testing.T) {
	t.Parallel()
	if err := CheckParamsSchema([]byte(`{"type":"object"}`)); err != nil {
		t.Errorf("CheckParamsSchema(object) = %v, want nil", err)
	}
	for _, schema := range []string{"", "{not json"} {
		err := CheckParamsSchema([]byte(schema))
		var pe *stet.ProcessorError
		if !errors.As(err, &pe) || pe.Class != stet.FailureUnsupported || pe.Code != "invalid_schema" {
			t.Errorf("CheckParamsSchema(%q) = %v, want unsupported invalid_schema", schema, err)
		}
	}
}
