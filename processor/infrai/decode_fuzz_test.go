package infrai

import (
	"testing"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/processortest"
)

func fuzzHarness(bare bool) processortest.Harness {
	return processortest.Harness{
		Start:  func(t *testing.T) processortest.Fake { _, f := startConformanceFake(t, bare); return f },
		Open:   func(c processor.Common) (stet.Processor, error) { return open(c) },
		Common: common,
		Params: conformanceParams,
	}
}

// FuzzExtract feeds Infrai's response decoding (the envelope and the bare
// completion) and error classification arbitrary answers
// (processortest.FuzzExtract).
func FuzzExtract(f *testing.F) { processortest.FuzzExtract(f, fuzzHarness(false)) }

// FuzzExtractBare is FuzzExtract seeded with bare completions.
func FuzzExtractBare(f *testing.F) { processortest.FuzzExtract(f, fuzzHarness(true)) }

// TestFuzzSeeds checks the seed corpus exists; -update rewrites it from
// the fake's answers in both forms.
func TestFuzzSeeds(t *testing.T) {
	processortest.WriteFuzzSeeds(t, fuzzHarness(false), "FuzzExtract")
	processortest.WriteFuzzSeeds(t, fuzzHarness(true), "FuzzExtractBare")
}
