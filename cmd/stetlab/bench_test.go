package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stetlabs/stet/lab/bench"
)

// The benchmarks run end to end on a small count (they measure; this only
// checks that they still work and count what they claim).
func TestBenchRuns(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		count int
	}{{"intake", 100}, {"pipeline", 80}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runInProcess(t, "bench", tt.name, "-n", "100", "-concurrency", "4", "--json", "-dir", t.TempDir())
			if code != exitOK {
				t.Fatalf("bench %s = %d\nstderr: %s", tt.name, code, stderr)
			}
			var res bench.Result
			if err := json.Unmarshal([]byte(stdout), &res); err != nil {
				t.Fatalf("bench %s output: %v\n%s", tt.name, err, stdout)
			}
			if res.Count != tt.count || res.BaselineCount != tt.count || res.Ratio <= 0 {
				t.Errorf("bench %s = count %d, baseline count %d, ratio %v; want %d, %d, > 0", tt.name, res.Count, res.BaselineCount, res.Ratio, tt.count, tt.count)
			}
			// Each phase says what an item cost in CPU; SQLite has no server.
			if res.CPU == nil || res.CPU.Process <= 0 || res.CPU.Server != 0 || res.BaselineCPU == nil || res.BaselineCPU.Process <= 0 {
				t.Errorf("bench %s CPU per item = %+v, baseline %+v; want this process's time in both and no server", tt.name, res.CPU, res.BaselineCPU)
			}
			if tt.name == "intake" && (res.CeilingCPU == nil || res.CeilingCPU.Process <= 0) {
				t.Errorf("bench intake ceiling CPU per item = %+v, want this process's time", res.CeilingCPU)
			}
		})
	}
}

// stetlab bench batch on a small backfill: every document gets its record
// through a few batches, with no synchronous call.
func TestBenchBatchRuns(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runInProcess(t, "bench", "batch", "-n", "300", "--batch-size", "100", "--json", "-dir", t.TempDir())
	if code != exitOK {
		t.Fatalf("bench batch = %d\nstderr: %s", code, stderr)
	}
	var res bench.BatchResult
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("bench batch output: %v\n%s", err, stdout)
	}
	if res.Records != 300 || res.Batches != 3 || res.CreateCalls != 3 || res.SyncCalls != 0 || res.Wall <= 0 {
		t.Errorf("bench batch = %+v, want 300 records from 3 batches and no sync call", res)
	}
}

// runInProcess runs stetlab's run with args and returns its exit code,
// stdout and stderr.
func runInProcess(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}
