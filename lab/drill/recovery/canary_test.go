package recovery

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/stetlabs/stet/lab/fakekit"
	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/processor/openai/openaifake"
	"github.com/stetlabs/stet/seal"
)

// errorsOf is a T whose Errorf records instead of failing the test.
type errorsOf struct {
	*testing.T
	got []string
}

func (e *errorsOf) Errorf(format string, args ...any) {
	e.got = append(e.got, fmt.Sprintf(format, args...))
}

// AssertCanaryGone finds a canary inside a raw provider response, which is
// stored deflated (LIKE cannot see it there).
func TestAssertCanaryGoneReadsPackedRaw(t *testing.T) {
	t.Parallel()
	assertCanaryGoneFindsRaw(t, nil)
}

// It also opens a sealed raw response (encryption at rest), under the
// binding the ledger sealed it with (ledger.ArtifactID).
func TestAssertCanaryGoneReadsSealedRaw(t *testing.T) {
	t.Parallel()
	k, err := seal.NewKeyring([]seal.MasterKey{{ID: "k1", Key: bytes.Repeat([]byte{1}, seal.KeySize)}})
	if err != nil {
		t.Fatal(err)
	}
	assertCanaryGoneFindsRaw(t, k)
}

func assertCanaryGoneFindsRaw(t *testing.T, keys *seal.Keyring) {
	const canary = "CANARY-raw-7f3a"
	e := stettest.New(t, stettest.Options{Keyring: keys, FakeOptions: openaifake.Options{Respond: func(req openaifake.Request) string {
		return strings.Replace(fakekit.MinimalInstance(req.Schema), `"ok"`, `"`+canary+`"`, 1)
	}}})
	r := e.Deliver(stettest.SourceReports, "msg_1", stettest.Report{ExternalID: "report-001", Revision: 1, Text: "Some text."})
	if r.Status != 202 {
		t.Fatalf("delivery = %d %s", r.Status, r.Body)
	}
	e.WaitFor("the artifact", func() bool { return e.Count("artifacts", "") == 1 })
	if n := e.Count("artifacts", "raw LIKE $1", "%"+canary+"%"); n != 0 {
		t.Fatalf("artifacts.raw LIKE the canary = %d rows; want the raw response stored packed", n)
	}
	rec := &errorsOf{T: t}
	AssertCanaryGone(rec, e, canary)
	if !strings.Contains(strings.Join(rec.got, "\n"), "artifacts.raw holds the canary") {
		t.Errorf("AssertCanaryGone = %q, want it to find the canary in artifacts.raw", rec.got)
	}
}
