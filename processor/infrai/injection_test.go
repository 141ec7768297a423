package infrai

import (
	"testing"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/infrai/infraifake"
	"github.com/stetlabs/stet/processor/processortest"
	"github.com/stetlabs/stet/schema"
)

func TestInjection(t *testing.T) {
	t.Parallel()
	s, err := schema.Compile("injection_v1", []byte(processortest.InjectionSchema))
	if err != nil {
		t.Fatal(err)
	}
	processortest.ExerciseInjection(t, processortest.InjectionHarness{
		Start: func(t *testing.T, respond func([]byte) string) string {
			return newFake(t, infraifake.Options{Respond: func(req infraifake.Request) string { return respond(req.Body) }}).URL()
		},
		Open:     func(c processor.Common) (stet.Processor, error) { return open(c) },
		Common:   common,
		Wire:     processortest.ChatWire,
		Validate: s.Validate,
	})
}
