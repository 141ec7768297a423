package gemini

import (
	"testing"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/processortest"
)

func fuzzHarness() processortest.Harness {
	return processortest.Harness{
		Start:  func(t *testing.T) processortest.Fake { _, f := startFake(t); return f },
		Open:   func(c processor.Common) (stet.Processor, error) { return New(Config{Common: c}) },
		Common: common,
	}
}

// FuzzExtract feeds generateContent's response decoding and error
// classification arbitrary answers (processortest.FuzzExtract).
func FuzzExtract(f *testing.F) { processortest.FuzzExtract(f, fuzzHarness()) }

// TestFuzzSeeds checks the seed corpus exists; -update rewrites it from
// the fake's answers.
func TestFuzzSeeds(t *testing.T) { processortest.WriteFuzzSeeds(t, fuzzHarness(), "FuzzExtract") }
