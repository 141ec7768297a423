package anthropic

import (
	"errors"
	"testing"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor/anthropic/anthropicfake"
	"github.com/stetlabs/stet/processor/processortest"
)

// An ended batch is deleted through DELETE /v1/messages/batches/{id}: it is
// then gone (status and results 404), and deleting it again is done. A
// batch still processing is refused (the API wants it cancelled first).
func TestDeleteBatch(t *testing.T) {
	t.Parallel()
	f := anthropicfake.New(anthropicfake.Options{APIKey: testKey})
	t.Cleanup(f.Close)
	c := batchClient(t, f, false, nil)
	h := submit(t, c, batchItems(2))
	if err := c.DeleteBatch(t.Context(), h.ProviderID); stet.ClassOf(err) != stet.FailureUnsupported {
		t.Errorf("DeleteBatch of a batch in progress = %v, want unsupported (the API refuses)", err)
	}
	if !f.EndBatch(h.ProviderID) {
		t.Fatal("EndBatch = false")
	}
	st, err := c.BatchStatus(t.Context(), h.ProviderID)
	if err != nil || st.State != stet.BatchCompleted {
		t.Fatalf("BatchStatus = %v, %v; want completed", st, err)
	}
	for i := range 2 {
		if err := c.DeleteBatch(t.Context(), h.ProviderID); err != nil {
			t.Fatalf("DeleteBatch #%d = %v, want nil", i+1, err)
		}
	}
	if n := f.BatchCounts().Deletes; n != 3 {
		t.Errorf("deletes at the fake = %d, want 3", n)
	}
	var pe *stet.ProcessorError
	if _, err := c.BatchStatus(t.Context(), h.ProviderID); !errors.As(err, &pe) || pe.Code != codeBatchNotFound {
		t.Errorf("BatchStatus after delete = %v, want %s", err, codeBatchNotFound)
	}
	if _, err := c.BatchResults(t.Context(), st); err == nil {
		t.Error("BatchResults after delete = nil error, want the results gone")
	}
	for _, b := range f.Batches() {
		if b.ID == h.ProviderID {
			t.Errorf("the fake still lists batch %s", b.ID)
		}
	}
}

// A failed delete carries the class the pipeline decides from, and no
// provider message; message batches have no files, so DeleteFile makes no
// call and answers stet.CodeNoDeleteAPI.
func TestDeleteBatchFailures(t *testing.T) {
	t.Parallel()
	canary := processortest.DeleteCanary
	processortest.ExerciseDeleteFailures(t, []processortest.DeleteFailure[anthropicfake.Fault]{
		{Name: "server error", Fault: anthropicfake.Fault{Kind: anthropicfake.ServerError, Message: canary}, Class: stet.FailureTransient},
		{Name: "overloaded", Fault: anthropicfake.Fault{Kind: anthropicfake.Overloaded, Message: canary}, Class: stet.FailureTransient},
		{Name: "rate limited", Fault: anthropicfake.Fault{Kind: anthropicfake.RateLimit, Message: canary}, Class: stet.FailureRateLimited},
		{Name: "disconnect", Fault: anthropicfake.Fault{Kind: anthropicfake.Disconnect}, Class: stet.FailureTransient},
	}, func(t *testing.T, fault anthropicfake.Fault) (string, func() error) {
		f := anthropicfake.New(anthropicfake.Options{APIKey: testKey})
		t.Cleanup(f.Close)
		c := batchClient(t, f, false, nil)
		h := submit(t, c, batchItems(1))
		f.EndBatch(h.ProviderID)
		f.EnqueueBatchFaults(anthropicfake.RouteBatchDelete, fault)
		return h.ProviderID, func() error { return c.DeleteBatch(t.Context(), h.ProviderID) }
	})
	f := anthropicfake.New(anthropicfake.Options{APIKey: testKey})
	t.Cleanup(f.Close)
	c := batchClient(t, f, false, nil)
	processortest.CheckNoDeleteAPI(t, "DeleteFile", c.DeleteFile(t.Context(), "file_anything"))
	if n := f.BatchCounts(); n != (anthropicfake.BatchCounts{}) {
		t.Errorf("DeleteFile made calls: %+v", n)
	}
}
