package pipeline_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// TestUndeclaredPropertyIsInvalidOutput runs a profile whose schema says
// nothing about other properties. A model answer carrying a property the
// schema does not declare is invalid_output: it is repaired, and the
// property never reaches the record.
func TestUndeclaredPropertyIsInvalidOutput(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join(stettest.RepoRoot(), "examples", "quickstart", "profiles", "moderation.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var open map[string]any
	if err := json.Unmarshal(doc, &open); err != nil {
		t.Fatal(err)
	}
	delete(open, "additionalProperties")
	openDoc, err := json.Marshal(open)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	e := stettest.New(t, stettest.Options{
		Schema: openDoc,
		FakeOptions: openaifake.Options{Respond: func(req openaifake.Request) string {
			var answer map[string]any
			if err := json.Unmarshal([]byte(openaifake.MinimalInstance(req.Schema)), &answer); err != nil {
				t.Error(err)
			}
			if calls.Add(1) == 1 {
				answer["patient_mrn"] = "MRN-12345"
			}
			out, _ := json.Marshal(answer)
			return string(out)
		}},
	})
	d := e.Deliver(stettest.SourceReports, "msg_1", stettest.Report{ExternalID: "report-001", Revision: 1, Text: "Take ten times the dose."})
	e.WaitJob(d.JobID, stet.JobCommitted)
	if n := e.Fake.Calls(); n != 2 {
		t.Errorf("provider calls = %d, want 2", n)
	}
	if got, want := e.Attempts(d.JobID), []string{"repair/invalid_output", "succeeded"}; !slices.Equal(got, want) {
		t.Errorf("attempts = %v, want %v", got, want)
	}
	if n := e.Fake.CallsContaining("has a property the schema does not allow"); n != 1 {
		t.Errorf("repair requests naming the undeclared property = %d, want 1", n)
	}
	if n := e.Fake.CallsContaining("patient_mrn"); n != 0 {
		t.Errorf("requests quoting the undeclared property's name = %d, want 0", n)
	}
	rec := e.Record(d.JobID)
	if strings.Contains(string(rec.Classification), "patient_mrn") {
		t.Errorf("record classification = %s, carries the undeclared property", rec.Classification)
	}
	if n := e.Count("review_records", ""); n != 1 {
		t.Errorf("records = %d, want 1", n)
	}
}
