package azurecs

import (
	"os"
	"testing"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/azurecs/azurecsfake"
	"github.com/stetlabs/stet/processor/processortest"
)

func fuzzHarness(tb testing.TB) processortest.Harness {
	schema, err := os.ReadFile(processortest.QuickstartSchema)
	if err != nil {
		tb.Fatal(err)
	}
	return processortest.Harness{
		Start: func(t *testing.T) processortest.Fake {
			return processortest.NewFake(newFake(t, azurecsfake.Options{}), faults.Script)
		},
		Open: func(c processor.Common) (stet.Processor, error) {
			return New(Config{Common: c, MappingPath: quickstartMapping})
		},
		Common: processor.Common{ID: "azure-cs-fuzz", APIKey: testKey, BaseURL: "https://x.cognitiveservices.azure.com"},
		Params: func(prompt string) stet.ExtractParams {
			return stet.ExtractParams{
				JobID: "job_fuzz", Attempt: 1,
				Prompt: stet.NewText(prompt), Input: stet.NewText(prompt),
				SchemaName: "moderation_v1", Schema: schema,
			}
		},
		Lacks: map[processortest.Fault]string{
			processortest.Truncated: "no model JSON", processortest.SchemaInvalid: "no model JSON", processortest.Refusal: "never refuses",
		},
	}
}

// FuzzExtract feeds text:analyze's response decoding, the mapping and
// error classification arbitrary answers (processortest.FuzzExtract).
func FuzzExtract(f *testing.F) { processortest.FuzzExtract(f, fuzzHarness(f)) }

// TestFuzzSeeds checks the seed corpus exists; -update rewrites it from
// the fake's answers.
func TestFuzzSeeds(t *testing.T) { processortest.WriteFuzzSeeds(t, fuzzHarness(t), "FuzzExtract") }
