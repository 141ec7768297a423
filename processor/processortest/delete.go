package processortest

import (
	"errors"
	"strings"
	"testing"

	"github.com/stetlabs/stet"
)

// DeleteCanary is the provider message the faults of DeleteFailure cases
// carry; no delete error may repeat it.
const DeleteCanary = "CANARY-DEL"

// DeleteFailure is one scripted fault of a delete call (a provider fault
// of type F) and the class its error must carry.
type DeleteFailure[F any] struct {
	Name  string
	Fault F
	Class stet.FailureClass
}

// ExerciseDeleteFailures runs each case as a parallel subtest: start must
// start a fake holding something to delete, script the case's fault for
// the next delete, and return the ID of what is deleted and the delete
// call. The call must fail with the case's class, its error carrying
// neither DeleteCanary nor the ID; the retry must succeed (the copy is
// still there, or already gone, which is done).
func ExerciseDeleteFailures[F any](t *testing.T, cases []DeleteFailure[F], start func(t *testing.T, fault F) (id string, del func() error)) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			id, del := start(t, tc.Fault)
			err := del()
			if got := stet.ClassOf(err); err == nil || got != tc.Class {
				t.Fatalf("delete = %v (%s), want %s", err, got, tc.Class)
			}
			if strings.Contains(err.Error(), DeleteCanary) || strings.Contains(err.Error(), id) {
				t.Errorf("error %q carries provider text or the id", err)
			}
			if err := del(); err != nil {
				t.Errorf("delete again = %v, want nil", err)
			}
		})
	}
}

// CheckNoDeleteAPI fails t unless err says the provider has no API for
// this delete: unsupported, code stet.CodeNoDeleteAPI.
func CheckNoDeleteAPI(t *testing.T, what string, err error) {
	t.Helper()
	var pe *stet.ProcessorError
	if !errors.As(err, &pe) || pe.Class != stet.FailureUnsupported || pe.Code != stet.CodeNoDeleteAPI {
		t.Errorf("%s = %v, want unsupported %s", what, err, stet.CodeNoDeleteAPI)
	}
}
