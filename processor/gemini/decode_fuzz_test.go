package gemini

import (
	"testing"

	"github.com/stetlabs/stet/processor/processortest"
)

// FuzzExtract feeds generateContent's response decoding and error
// classification arbitrary answers (processortest.FuzzExtract).
func FuzzExtract(f *testing.F) { processortest.FuzzExtract(f, harness()) }

// TestFuzzSeeds checks the seed corpus exists; -update rewrites it from
// the fake's answers.
func TestFuzzSeeds(t *testing.T) { processortest.WriteFuzzSeeds(t, harness(), "FuzzExtract") }
