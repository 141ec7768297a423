package infrai

import (
	"testing"

	"github.com/stetlabs/stet/processor/processortest"
)

// FuzzExtract feeds Infrai's response decoding (the envelope and the bare
// completion) and error classification arbitrary answers
// (processortest.FuzzExtract).
func FuzzExtract(f *testing.F) { processortest.FuzzExtract(f, harness(false)) }

// FuzzExtractBare is FuzzExtract seeded with bare completions.
func FuzzExtractBare(f *testing.F) { processortest.FuzzExtract(f, harness(true)) }

// TestFuzzSeeds checks the seed corpus exists; -update rewrites it from
// the fake's answers in both forms.
func TestFuzzSeeds(t *testing.T) {
	processortest.WriteFuzzSeeds(t, harness(false), "FuzzExtract")
	processortest.WriteFuzzSeeds(t, harness(true), "FuzzExtractBare")
}
