package anthropic

import (
	"testing"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/processortest"
)

func fuzzHarness(toolUse bool) processortest.Harness {
	return processortest.Harness{
		Start: func(t *testing.T) processortest.Fake { _, f := startFake(t); return f },
		Open: func(c processor.Common) (stet.Processor, error) {
			return New(Config{Common: c, ToolUse: toolUse})
		},
		Common: common,
	}
}

// FuzzExtract feeds the Messages API's response decoding and error
// classification arbitrary answers (processortest.FuzzExtract), in the
// structured-output form.
func FuzzExtract(f *testing.F) { processortest.FuzzExtract(f, fuzzHarness(false)) }

// FuzzExtractToolUse is FuzzExtract in the forced tool use form.
func FuzzExtractToolUse(f *testing.F) { processortest.FuzzExtract(f, fuzzHarness(true)) }

// TestFuzzSeeds checks the seed corpora exist; -update rewrites them from
// the fake's answers.
func TestFuzzSeeds(t *testing.T) {
	processortest.WriteFuzzSeeds(t, fuzzHarness(false), "FuzzExtract")
	processortest.WriteFuzzSeeds(t, fuzzHarness(true), "FuzzExtractToolUse")
}
