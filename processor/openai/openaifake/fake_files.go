package openaifake

// The Files routes of the Batch API: upload (multipart), metadata, content
// and deletion. Files live in fakeBatches beside the batches that use them.

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"
)

// purposes are the upload purposes the API accepts.
var purposes = []string{"assistants", "batch", "fine-tune", "vision", "user_data", "evals"}

func (f *Server) batchUpload(r *http.Request) batchAnswer {
	mr, err := r.MultipartReader()
	if err != nil {
		return errAnswer(http.StatusBadRequest, apiError{Message: "Invalid request: the body must be multipart/form-data.", Type: "invalid_request_error"})
	}
	var (
		purpose, filename string
		content           []byte
		haveFile          bool
	)
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return errAnswer(http.StatusBadRequest, apiError{Message: "Invalid multipart body.", Type: "invalid_request_error"})
		}
		data, err := io.ReadAll(io.LimitReader(part, maxFakeUpload+1))
		if err != nil || len(data) > maxFakeUpload {
			return errAnswer(http.StatusRequestEntityTooLarge, apiError{Message: "File too large.", Type: "invalid_request_error", Param: "file"})
		}
		switch part.FormName() {
		case "purpose":
			purpose = string(data)
		case "file":
			filename, content, haveFile = part.FileName(), data, true
		}
	}
	switch {
	case !haveFile:
		return missingParam("file")
	case purpose == "":
		return missingParam("purpose")
	case !slices.Contains(purposes, purpose):
		return invalidParam("purpose", "Invalid value for 'purpose': '"+purpose+"'.")
	case purpose == "batch" && !strings.HasSuffix(filename, ".jsonl"):
		return errAnswer(http.StatusBadRequest, apiError{Message: "Invalid file format for Batch API. Must be .jsonl", Type: "invalid_request_error"})
	}

	now := f.clock.Now()
	fb := f.batch
	fb.mu.Lock()
	defer fb.mu.Unlock()
	ttl := time.Duration(0)
	if purpose == "batch" {
		// Batch input files expire after 30 days by default.
		ttl = fakeFileRetention
	}
	ff := fb.addFile(now, purpose, filename, content, ttl)
	if purpose == "batch" {
		for _, l := range splitLines(content) {
			var line struct {
				Body json.RawMessage `json:"body"`
			}
			if json.Unmarshal(l, &line) != nil {
				continue
			}
			req, _ := decodeFakeRequest(line.Body)
			fb.inputs.Record(req.UserText())
		}
	}
	return okAnswer(fileObject(ff))
}

// addFile stores a file. fb.mu is held.
func (fb *fakeBatches) addFile(now time.Time, purpose, filename string, content []byte, ttl time.Duration) *File {
	ff := &File{
		ID:        "file-" + rand.Text()[:22],
		Purpose:   purpose,
		Filename:  filename,
		Bytes:     len(content),
		CreatedAt: now.UTC(),
		Content:   content,
	}
	if ttl > 0 {
		ff.ExpiresAt = ff.CreatedAt.Add(ttl)
	}
	fb.files[ff.ID] = ff
	fb.fileOrder = append(fb.fileOrder, ff.ID)
	return ff
}

func fileObject(ff *File) wireFile {
	w := wireFile{
		Object:    "file",
		ID:        ff.ID,
		Purpose:   ff.Purpose,
		Filename:  ff.Filename,
		Bytes:     ff.Bytes,
		CreatedAt: ff.CreatedAt.Unix(),
		Status:    "processed",
	}
	if !ff.ExpiresAt.IsZero() {
		w.ExpiresAt = ptr(ff.ExpiresAt.Unix())
	}
	return w
}

// file returns a live file. fb.mu is held.
func (fb *fakeBatches) file(id string) (*File, bool) {
	ff, ok := fb.files[id]
	if !ok || ff.Deleted {
		return nil, false
	}
	return ff, true
}

// withFile answers with do's answer for the live file id, under fb.mu, or
// with the API's 404 when there is none.
func (f *Server) withFile(id string, do func(fb *fakeBatches, ff *File) batchAnswer) batchAnswer {
	fb := f.batch
	fb.mu.Lock()
	defer fb.mu.Unlock()
	ff, found := fb.file(id)
	if !found {
		return noSuchFile(id)
	}
	return do(fb, ff)
}

func (f *Server) batchGetFile(id string) batchAnswer {
	return f.withFile(id, func(_ *fakeBatches, ff *File) batchAnswer { return okAnswer(fileObject(ff)) })
}

func (f *Server) batchContent(id string) batchAnswer {
	return f.withFile(id, func(fb *fakeBatches, ff *File) batchAnswer {
		if ff.Purpose == "batch_output" {
			fb.stats.ResultFetches++
		}
		return batchAnswer{status: http.StatusOK, body: slices.Clone(ff.Content), contentType: "application/octet-stream"}
	})
}

func (f *Server) batchDeleteFile(id string) batchAnswer {
	return f.withFile(id, func(_ *fakeBatches, ff *File) batchAnswer {
		ff.Deleted = true
		return okAnswer(struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Deleted bool   `json:"deleted"`
		}{ff.ID, "file", true})
	})
}
