package processortest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stetlabs/stet"
)

// CheckBatchStates fails the test for each provider word in want that
// state (the adapter's mapping, named name in messages) maps to another
// stet state.
func CheckBatchStates(t *testing.T, name string, state func(word string) stet.BatchState, want map[string]stet.BatchState) {
	t.Helper()
	for word, w := range want {
		if got := state(word); got != w {
			t.Errorf("%s(%q) = %q, want %q", name, word, got, w)
		}
	}
}

// NoCanaryErrors fails the test unless every error in errs is a
// *stet.ProcessorError whose text (Error, %v, %+v), Code and RequestID
// carry neither the canary ("CANARY", "Jane Roe") nor any of ids (provider
// batch and file IDs).
func NoCanaryErrors(t *testing.T, errs []error, ids ...string) {
	t.Helper()
	for i, err := range errs {
		what := fmt.Sprintf("error %d", i)
		pe := AsProcessorError(t, what, err)
		noCanary(t, what, err, ids...)
		for _, s := range []string{pe.Code, pe.RequestID} {
			if strings.Contains(s, "CANARY") || strings.Contains(s, "Jane Roe") {
				t.Errorf("%s: Code %q / RequestID %q carry the canary", what, pe.Code, pe.RequestID)
			}
			for _, x := range ids {
				if x != "" && strings.Contains(s, x) {
					t.Errorf("%s: Code %q / RequestID %q carry the provider ID %q", what, pe.Code, pe.RequestID, x)
				}
			}
		}
	}
}

// WithPrompt sets every item's prompt to prompt and returns items.
func WithPrompt(items []stet.BatchItem, prompt string) []stet.BatchItem {
	for i := range items {
		items[i].Params.Prompt = stet.NewText(prompt)
	}
	return items
}

// StatusAndResults looks up the batch providerID once and reads the
// results of what the lookup reports, failing the test if either call
// fails.
func StatusAndResults(t *testing.T, p stet.BatchProcessor, providerID string) (*stet.BatchStatus, []stet.BatchResult) {
	t.Helper()
	st, err := p.BatchStatus(t.Context(), providerID)
	if err != nil {
		t.Fatalf("BatchStatus() = %v", err)
	}
	rs, err := p.BatchResults(t.Context(), st)
	if err != nil {
		t.Fatalf("BatchResults() = %v", err)
	}
	return st, rs
}
