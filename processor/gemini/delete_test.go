package gemini

import (
	"errors"
	"testing"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor/gemini/geminifake"
)

// A file batch's input and results files and the batch itself are deleted
// through DELETE files/{id} and DELETE batches/{id}: each is then gone
// (404), and deleting it again is done. An inline batch, whose requests
// and answers live in the batch object, is gone with its batch.
func TestDeleteCopies(t *testing.T) {
	t.Parallel()
	for _, inline := range []bool{false, true} {
		name := map[bool]string{false: "file", true: "inline"}[inline]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, geminifake.Options{})
			c := newBatchClient(t, f, nil)
			if !inline {
				c.inlineLimit = 1
			}
			st, _ := runToResults(t, c, "bat_del_"+name, withCanary(batchItems("a", "b")))
			if !inline && (st.InputFileID == "" || st.OutputFileID == "") {
				t.Fatalf("file batch: input %q, output %q; want both", st.InputFileID, st.OutputFileID)
			}
			files := []string{st.InputFileID, st.OutputFileID}
			if inline {
				files = nil
			}
			for range 2 {
				for _, id := range files {
					if err := c.DeleteFile(t.Context(), id); err != nil {
						t.Fatalf("DeleteFile(%q) = %v, want nil", id, err)
					}
				}
				if err := c.DeleteBatch(t.Context(), st.ProviderID); err != nil {
					t.Fatalf("DeleteBatch = %v, want nil", err)
				}
			}
			n := f.BatchCounts()
			if n.Deletes != 2 || n.FileDeletes != 2*len(files) {
				t.Errorf("fake: %d batch deletes, %d file deletes; want 2 and %d", n.Deletes, n.FileDeletes, 2*len(files))
			}
			for _, id := range files {
				if _, ok := f.File(id); ok {
					t.Errorf("the fake still holds %s", id)
				}
			}
			if len(f.Batches()) != 0 {
				t.Errorf("the fake still holds %d batches", len(f.Batches()))
			}
			var pe *stet.ProcessorError
			if _, err := c.BatchStatus(t.Context(), st.ProviderID); !errors.As(err, &pe) || pe.Code != codeBatchNotFound {
				t.Errorf("BatchStatus after delete = %v, want %s", err, codeBatchNotFound)
			}
		})
	}
}

// A delete with a wrong key is auth (never done), and malformed IDs are
// refused before any call.
func TestDeleteRefusals(t *testing.T) {
	t.Parallel()
	f := newFake(t, geminifake.Options{})
	c := newBatchClient(t, f, nil)
	c.inlineLimit = 1
	st, _ := runToResults(t, c, "bat_del_auth", batchItems("a"))
	wrong := newBatchClient(t, f, func(cfg *Config) { cfg.APIKey = "wrong-key" })
	if err := wrong.DeleteFile(t.Context(), st.InputFileID); stet.ClassOf(err) != stet.FailureAuth {
		t.Errorf("DeleteFile with a wrong key = %v, want auth", err)
	}
	if err := wrong.DeleteBatch(t.Context(), st.ProviderID); stet.ClassOf(err) != stet.FailureAuth {
		t.Errorf("DeleteBatch with a wrong key = %v, want auth", err)
	}
	if _, ok := f.File(st.InputFileID); !ok {
		t.Error("a delete with a wrong key removed the file")
	}
	if len(f.Batches()) != 1 {
		t.Error("a delete with a wrong key removed the batch")
	}
	before := f.BatchCounts()
	for _, id := range []string{"", "files/a/../b", "batches/x"} {
		if err := c.DeleteFile(t.Context(), id); stet.ClassOf(err) != stet.FailureUnsupported {
			t.Errorf("DeleteFile(%q) = %v, want unsupported", id, err)
		}
	}
	if err := c.DeleteBatch(t.Context(), "batches/a?b"); stet.ClassOf(err) != stet.FailureUnsupported {
		t.Errorf("DeleteBatch(malformed) = %v, want unsupported", err)
	}
	if after := f.BatchCounts(); after != before {
		t.Errorf("malformed ids made calls: %+v -> %+v", before, after)
	}
}
