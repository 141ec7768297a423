package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stetlabs/stet/lab/drill/recovery"
)

func TestChaosFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want int
	}{
		{[]string{"drill", "--bogus"}, exitUsage},
		{[]string{"drill", "nope"}, exitUsage},
		{[]string{"drill", "1", "6"}, exitUsage}, // 6 kills the binary: a test of its own, not a named drill
		{[]string{"drill", "chaos", "--reports", "0"}, exitUsage},
		{[]string{"drill", "chaos", "--workers", "0"}, exitUsage},
		{[]string{"drill", "chaos", "--kills", "-1"}, exitUsage},
		{[]string{"drill", "chaos", "--fault-rate", "0.9"}, exitUsage},
		{[]string{"drill", "chaos", "--seed", "forty-two"}, exitUsage},
		{[]string{"drill", "chaos", "extra"}, exitUsage},
		{[]string{"drill", "chaos", "--pgbin", filepath.Join(t.TempDir(), "none")}, exitUnhealthy},
		{[]string{"drill", "help"}, exitOK},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		if got := run(context.Background(), tt.args, &stdout, &stderr); got != tt.want {
			t.Errorf("run(%q) = %d, want %d; stderr %q", tt.args, got, tt.want, stderr.String())
		}
	}
}

// The drill's help cites docs/design.md by that file's own section numbers.
func TestDrillHelp(t *testing.T) {
	t.Parallel()
	code, stdout, _ := runInProcess(t, "drill", "-h")
	if code != exitOK || !strings.Contains(stdout, "recovery drills of docs/design.md §10 ") || strings.Contains(stdout, "DESIGN") {
		t.Errorf("stetlab drill -h = %d:\n%s", code, stdout)
	}
	code, _, stderr := runInProcess(t, "drill", "chaos", "-h")
	if code != exitOK || !strings.Contains(stderr, "(docs/design.md §13)") || !strings.Contains(stderr, "--stet-binary") {
		t.Errorf("stetlab drill chaos -h = %d:\n%s", code, stderr)
	}
}

// stetlab drill NAME runs the named recovery drills in-process and prints
// their outcomes: the table, or with --json the same outcomes as JSON.
func TestDrillNamed(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if got := run(context.Background(), []string{"drill", "1", "10"}, &stdout, &stderr); got != exitOK {
		t.Fatalf("stetlab drill 1 10 = %d, want 0\nstdout:\n%s\nstderr:\n%s", got, stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"drill", "expectation", "provider calls", "1 duplicate deliveries", "10 policy drops the processor", "PASS"} {
		if !strings.Contains(out, want) {
			t.Errorf("stetlab drill 1 10 output lacks %q:\n%s", want, out)
		}
	}
	stdout.Reset()
	if got := run(context.Background(), []string{"drill", "5", "--json"}, &stdout, &stderr); got != exitOK {
		t.Fatalf("stetlab drill 5 --json = %d, want 0\n%s", got, stderr.String())
	}
	var res struct {
		OK     bool               `json:"ok"`
		Drills []recovery.Outcome `json:"drills"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("stetlab drill 5 --json: %v\n%s", err, stdout.String())
	}
	want := recovery.Counts{Reports: 1, Jobs: 1, Records: 1, Calls: 2}
	if !res.OK || len(res.Drills) != 1 || res.Drills[0].Observed != want || !res.Drills[0].OK {
		t.Errorf("stetlab drill 5 --json = %+v, want one ok outcome observing %v", res, want)
	}
}
