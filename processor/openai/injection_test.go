package openai

import (
	"testing"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/openai/openaifake"
	"github.com/stetlabs/stet/processor/processortest"
	"github.com/stetlabs/stet/schema"
)

// injectionValidator is the pipeline's validator of the suite's schema.
func injectionValidator(t *testing.T) func([]byte) []string {
	s, err := schema.Compile("injection_v1", []byte(processortest.InjectionSchema))
	if err != nil {
		t.Fatal(err)
	}
	return s.Validate
}

func TestInjection(t *testing.T) {
	t.Parallel()
	processortest.ExerciseInjection(t, processortest.InjectionHarness{
		Start: func(t *testing.T, respond func([]byte) string) string {
			return newFake(t, openaifake.Options{Respond: func(req openaifake.Request) string { return respond(req.Body) }}).URL()
		},
		Open:     func(c processor.Common) (stet.Processor, error) { return New(Config{Common: c}) },
		Common:   common,
		Wire:     processortest.ChatWire,
		Validate: injectionValidator(t),
	})
}
