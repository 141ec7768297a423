package openai

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/openai/openaifake"
	"github.com/stetlabs/stet/processor/processortest"
)

// deleteFixture is a client over a fake holding one ended batch, and the
// batch's status (its input and output file IDs).
func deleteFixture(t *testing.T) (*Client, *openaifake.Server, *stet.BatchStatus) {
	t.Helper()
	f := openaifake.New(openaifake.Options{APIKey: testKey})
	t.Cleanup(f.Close)
	c, err := New(Config{Common: processor.Common{ID: "openai-test", BaseURL: f.URL(), APIKey: testKey, Model: testModel}})
	if err != nil {
		t.Fatal(err)
	}
	h := submit(t, c, "bat_del", "job_a", "job_b")
	var st *stet.BatchStatus
	for range 20 {
		if st, err = c.BatchStatus(t.Context(), h.ProviderID); err != nil {
			t.Fatalf("BatchStatus = %v", err)
		}
		if st.State.Terminal() {
			break
		}
	}
	if st.State != stet.BatchCompleted || st.InputFileID == "" || st.OutputFileID == "" {
		t.Fatalf("batch = %s, input %q, output %q; want completed with both files", st.State, st.InputFileID, st.OutputFileID)
	}
	return c, f, st
}

// The input and output files are deleted through DELETE /v1/files/{id}; a
// file is then gone (GET 404, results unreadable), and deleting it again
// is done (404 is already gone).
func TestDeleteFile(t *testing.T) {
	t.Parallel()
	c, f, st := deleteFixture(t)
	for _, id := range []string{st.InputFileID, st.OutputFileID, st.OutputFileID} {
		if err := c.DeleteFile(t.Context(), id); err != nil {
			t.Fatalf("DeleteFile(%q) = %v, want nil", id, err)
		}
	}
	if n := f.BatchStats().FileDeletes; n != 3 {
		t.Errorf("file deletes at the fake = %d, want 3", n)
	}
	for _, id := range []string{st.InputFileID, st.OutputFileID} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, f.URL()+"/files/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+testKey)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusNotFound {
			t.Errorf("GET /files/%s after delete = %d, want 404", id, res.StatusCode)
		}
	}
	if _, err := c.BatchResults(t.Context(), st); stet.ClassOf(err) != stet.FailureUnsupported {
		t.Errorf("BatchResults after the deletes = %v, want unsupported (results gone)", err)
	}
	deleted := 0
	for _, file := range f.Files() {
		if file.Deleted {
			deleted++
		}
	}
	if deleted != 2 {
		t.Errorf("files deleted at the fake = %d, want 2", deleted)
	}
}

// A failed file delete carries the class the pipeline decides from:
// transient and rate_limited are retried, auth is not; no provider message
// reaches the error.
func TestDeleteFileFailures(t *testing.T) {
	t.Parallel()
	canary := processortest.DeleteCanary
	processortest.ExerciseDeleteFailures(t, []processortest.DeleteFailure[openaifake.Fault]{
		{Name: "server error", Fault: openaifake.Fault{Kind: openaifake.ServerError, Message: canary}, Class: stet.FailureTransient},
		{Name: "rate limited", Fault: openaifake.Fault{Kind: openaifake.RateLimit, RetryAfter: "3", Message: canary}, Class: stet.FailureRateLimited},
		{Name: "unauthorized", Fault: openaifake.Fault{Kind: openaifake.Unauthorized, Message: canary}, Class: stet.FailureAuth},
		{Name: "disconnect", Fault: openaifake.Fault{Kind: openaifake.Disconnect}, Class: stet.FailureTransient},
	}, func(t *testing.T, fault openaifake.Fault) (string, func() error) {
		c, f, st := deleteFixture(t)
		f.EnqueueBatch(openaifake.BatchRouteDeleteFile, fault)
		// The file is still there after the failure; the retry deletes it.
		return st.InputFileID, func() error { return c.DeleteFile(t.Context(), st.InputFileID) }
	})
}

// OpenAI's API cannot delete a batch: DeleteBatch makes no call and says
// so with stet.CodeNoDeleteAPI, and Azure OpenAI refuses every delete.
func TestDeleteBatchHasNoAPI(t *testing.T) {
	t.Parallel()
	c, f, st := deleteFixture(t)
	before := f.BatchStats()
	processortest.CheckNoDeleteAPI(t, "DeleteBatch", c.DeleteBatch(t.Context(), st.ProviderID))
	if after := f.BatchStats(); after != before {
		t.Errorf("DeleteBatch made calls: %+v -> %+v", before, after)
	}
	az, err := New(Config{Common: processor.Common{ID: "azure", BaseURL: strings.TrimSuffix(f.URL(), "/v1"), APIKey: testKey, Model: "dep"}, AzureAPIVersion: "2024-10-21"})
	if err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{"DeleteFile": az.DeleteFile(t.Context(), st.InputFileID), "DeleteBatch": az.DeleteBatch(t.Context(), st.ProviderID)} {
		if stet.ClassOf(err) != stet.FailureUnsupported {
			t.Errorf("azure %s = %v, want unsupported", name, err)
		}
	}
	if n := f.BatchStats().FileDeletes; n != 0 {
		t.Errorf("file deletes at the fake = %d, want 0", n)
	}
}
