package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stetlabs/stet/lab/stettest"
)

// stet inspect on a job of a profile with parts (the parts example, run
// offline as the quickstart does) prints each part's job with its
// attempts, then the record's provenance: a line per field naming its
// part, processor and model, by part in config order. On a manual record
// it names the part that failed for good, and the fields that part lost
// have no line.
func TestInspectParts(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	examples := filepath.Join(stettest.RepoRoot(), "examples")
	copyTree(t, filepath.Join(examples, "quickstart"), filepath.Join(root, "quickstart"), "stet-data")
	copyTree(t, filepath.Join(examples, "parts"), filepath.Join(root, "parts"), "stet-data", "samples")
	if err := os.Symlink("../quickstart/samples", filepath.Join(root, "parts", "samples")); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "parts")
	if code, out, stderr := runInProcess(t, "quickstart", "--once", "--dir", dir, "--listen", "127.0.0.1:0"); code != exitOK {
		t.Fatalf("quickstart --dir examples/parts = %d\n%s\n%s", code, out, stderr)
	}
	cfg := filepath.Join(dir, "stet.yaml")
	target := testSource + "/report-001"

	code, out, stderr := runInProcess(t, "inspect", "--config", cfg, target)
	if code != exitOK || stderr != "" {
		t.Fatalf("stet inspect %s = %d\n%s\n%s", target, code, out, stderr)
	}
	for _, want := range []string{
		`(?m)^  part triage  job job_\w+  processor local-rules-triage  state committed$`,
		`(?m)^    n +token +processor +status`,
		`(?m)^    1 +\d+ +local-rules-triage +succeeded`,
		`(?m)^  part notes  job job_\w+  processor local-rules-notes  state committed$`,
		`(?m)^    1 +\d+ +local-rules-notes +succeeded`,
		`(?m)^  record rec_\w+ provenance$`,
		`(?m)^  field +part +processor +model$`,
		// By part in config order, then by field name.
		`(?m)^  action +triage +local-rules-triage +\S+\n  category +triage +local-rules-triage +\S+\n  severity +triage +local-rules-triage +\S+\n` +
			`  labels +notes +local-rules-notes +\S+\n  rationale +notes +local-rules-notes +\S+\n\n`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("stet inspect %s does not match %q:\n%s", target, want, out)
		}
	}
	if strings.Contains(out, "failed part") {
		t.Errorf("stet inspect %s names a failed part on an extracted record:\n%s", target, out)
	}

	// What a part refused for good leaves (the parts tests on the real
	// binary make one): a manual record naming the part, without
	// provenance for that part's fields.
	db := openLedgerRW(t, filepath.Join(dir, "stet-data", "stet.db"))
	if _, err := db.Exec(`UPDATE review_records SET kind = 'manual', failure_class = 'refusal', failed_part = 'triage',
		provenance = json_remove(provenance, '$.action', '$.category', '$.severity')`); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = runInProcess(t, "inspect", "--config", cfg, target)
	if code != exitOK || stderr != "" {
		t.Fatalf("stet inspect %s = %d\n%s\n%s", target, code, out, stderr)
	}
	for _, want := range []string{
		`(?m)^  review record rec_\w+  kind manual  authoritative \w+  class refusal`,
		`(?m)^  failed part triage: `,
		`(?m)^  field +part +processor +model\n  labels +notes +local-rules-notes +\S+\n  rationale +notes +local-rules-notes +\S+\n\n`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("stet inspect %s (manual) does not match %q:\n%s", target, want, out)
		}
	}
}
