package infrai

import (
	"testing"

	"github.com/stetlabs/stet"
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
		Start: func(t *testing.T, answer string) (string, func() [][]byte) {
			var got processortest.Bodies
			f := newFake(t, infraifake.Options{Respond: func(req infraifake.Request) string {
				got.Add(req.Body)
				return answer
			}})
			return f.URL(), got.All
		},
		Open: func(url string) (stet.Processor, error) {
			c := common
			c.BaseURL = url
			return open(c)
		},
		Wire:     processortest.ChatWire,
		Validate: s.Validate,
	})
}
