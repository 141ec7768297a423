package ledger

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet"
)

// stet inspect's text: a blocked job says its class and what it stands
// for; a manual job's record time is labelled "manual"; the record line
// gives its kind and authoritative flag.
func TestJobDetailWriteText(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	blocked := &JobDetail{Job: stet.Job{ID: "job_1", State: stet.JobBlocked, FailureClass: stet.FailureBoundary, CreatedAt: at}}
	var b bytes.Buffer
	blocked.WriteText(&b)
	if !strings.Contains(b.String(), "  blocked: class boundary (the recorded policy no longer permits the processor, or it is not configured)") {
		t.Errorf("blocked job:\n%s\nwant its class and what it stands for", b.String())
	}
	manual := &JobDetail{Job: stet.Job{ID: "job_2", State: stet.JobManual, CreatedAt: at, CommittedAt: at.Add(time.Minute), ReviewRecordID: "rec_2"},
		Record: &RecordMeta{ID: "rec_2", Kind: stet.RecordManual, Authoritative: true, FailureClass: stet.FailureRefusal, CreatedAt: at.Add(time.Minute)}}
	b.Reset()
	manual.WriteText(&b)
	out := b.String()
	for _, want := range []string{"  manual      2026-12-01T10:01:00Z", "  review record rec_2  kind manual  authoritative true  class refusal"} {
		if !strings.Contains(out, want) {
			t.Errorf("manual job:\n%s\nwant %q", out, want)
		}
	}
	if strings.Contains(out, "committed") || strings.Contains(out, "blocked:") {
		t.Errorf("manual job:\n%s\nhas a committed stage or a blocked line", out)
	}
}
