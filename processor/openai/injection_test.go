package openai

import (
	"testing"

	"github.com/stetlabs/stet"
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
		Start: func(t *testing.T, answer string) (string, func() [][]byte) {
			var got processortest.Bodies
			f := newFake(t, openaifake.Options{Respond: func(req openaifake.Request) string {
				got.Add(req.Body)
				return answer
			}})
			return f.URL(), got.All
		},
		Open: func(url string) (stet.Processor, error) {
			c := common
			c.BaseURL = url
			return New(Config{Common: c})
		},
		Wire:     processortest.ChatWire,
		Validate: injectionValidator(t),
	})
}
