package anthropic

import (
	"testing"

	"github.com/stetlabs/stet/processor/processortest"
)

// FuzzExtract feeds the Messages API's response decoding and error
// classification arbitrary answers (processortest.FuzzExtract), in the
// structured-output form.
func FuzzExtract(f *testing.F) { processortest.FuzzExtract(f, harness(false)) }

// FuzzExtractToolUse is FuzzExtract in the forced tool use form.
func FuzzExtractToolUse(f *testing.F) { processortest.FuzzExtract(f, harness(true)) }

// TestFuzzSeeds checks the seed corpora exist; -update rewrites them from
// the fake's answers.
func TestFuzzSeeds(t *testing.T) {
	processortest.WriteFuzzSeeds(t, harness(false), "FuzzExtract")
	processortest.WriteFuzzSeeds(t, harness(true), "FuzzExtractToolUse")
}
