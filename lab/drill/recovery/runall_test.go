package recovery

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

// RunAll runs nothing once its context has ended, and says so.
func TestRunAllStopsWhenCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var progress bytes.Buffer
	rep, err := RunAll(ctx, All(), &progress)
	if !errors.Is(err, context.Canceled) || rep != nil || progress.Len() != 0 {
		t.Errorf("RunAll(cancelled) = %v, %v, progress %q; want context.Canceled and no drill run", rep, err, progress.String())
	}
}

// Report.WriteText ends with PASS only when every drill passed.
func TestReportWriteText(t *testing.T) {
	t.Parallel()
	for _, ok := range []bool{true, false} {
		var b bytes.Buffer
		(&Report{OK: ok, Drills: []Outcome{{Drill: "1", Title: "duplicate deliveries", OK: ok}}}).WriteText(&b)
		want := "\nPASS\n"
		if !ok {
			want = "\nFAIL\n"
		}
		if !strings.HasSuffix(b.String(), want) {
			t.Errorf("WriteText(ok %v) = %q, want it to end %q", ok, b.String(), want)
		}
	}
}
