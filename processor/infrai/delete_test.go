package infrai

import (
	"testing"

	"github.com/stetlabs/stet/processor/infrai/infraifake"
	"github.com/stetlabs/stet/processor/processortest"
)

// Infrai documents no delete route: both deletes answer unsupported with
// stet.CodeNoDeleteAPI and make no call, so the deletion's tasks end
// unresolved with that reason rather than done.
func TestDeleteHasNoAPI(t *testing.T) {
	t.Parallel()
	f := newFake(t, infraifake.Options{APIKey: testKey})
	c := clientWith(t, f, nil, 0)
	h, err := c.SubmitBatch(t.Context(), submitOf(batchItems(1)))
	if err != nil {
		t.Fatalf("SubmitBatch = %v", err)
	}
	calls := f.Calls()
	for name, err := range map[string]error{
		"DeleteBatch": c.DeleteBatch(t.Context(), h.ProviderID),
		"DeleteFile":  c.DeleteFile(t.Context(), "file_1"),
	} {
		processortest.CheckNoDeleteAPI(t, name, err)
	}
	if n := f.Calls(); n != calls {
		t.Errorf("calls at the fake = %d, want %d (the deletes make none)", n, calls)
	}
	if len(f.Batches()) != 1 {
		t.Errorf("the fake holds %d batches, want 1", len(f.Batches()))
	}
}
