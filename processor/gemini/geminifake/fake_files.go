package geminifake

// The Files API routes the batch side uses: resumable upload, metadata,
// download and delete.

import (
	"cmp"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stetlabs/stet/lab/fakekit"
)

// The Files API resumable upload: a start request answered with
// X-Goog-Upload-URL, then the bytes in chunks, the last one finalizing.
// Every answer carries X-Goog-Upload-Status, without which the SDK waits and
// asks again.
func (f *Server) serveUpload(w http.ResponseWriter, r *http.Request) {
	body, _ := fakekit.ReadBody(r, maxFakeRequest)
	st := &f.batch
	if !f.authorized(w, r) {
		return
	}
	uploadError := func(status int, msg string) {
		writeAPIError(w, status, []http.Header{{"X-Goog-Upload-Status": {"final"}}}, apiErrorBody{Message: msg, Status: rpcStatus(status)})
	}
	command := strings.ToLower(r.Header.Get("X-Goog-Upload-Command"))
	id := r.URL.Query().Get("upload_id")
	if id == "" {
		if r.Method != http.MethodPost || !strings.EqualFold(r.Header.Get("X-Goog-Upload-Protocol"), "resumable") || command != "start" {
			uploadError(http.StatusBadRequest, "Only the resumable upload protocol is supported.")
			return
		}
		var start struct {
			File struct {
				DisplayName string `json:"displayName"`
				MIMEType    string `json:"mimeType"`
			} `json:"file"`
		}
		if len(body) > 0 && json.Unmarshal(body, &start) != nil {
			uploadError(http.StatusBadRequest, "Invalid JSON payload received.")
			return
		}
		id = fakeID(24)
		st.mu.Lock()
		st.uploads[id] = &fakeUpload{
			displayName: start.File.DisplayName,
			mime:        cmp.Or(r.Header.Get("X-Goog-Upload-Header-Content-Type"), start.File.MIMEType, "application/octet-stream"),
		}
		st.mu.Unlock()
		h := w.Header()
		setDefaultHeaders(h)
		h.Set("X-Goog-Upload-URL", "http://"+r.Host+"/upload/v1beta/files?upload_id="+id+"&upload_protocol=resumable")
		h.Set("X-Goog-Upload-Status", "active")
		h.Set("X-Goog-Upload-Chunk-Granularity", "262144")
		h.Set("Content-Length", "0")
		w.WriteHeader(http.StatusOK)
		return
	}
	offset, err := strconv.Atoi(r.Header.Get("X-Goog-Upload-Offset"))
	st.mu.Lock()
	up, ok := st.uploads[id]
	switch {
	case !ok:
		st.mu.Unlock()
		uploadError(http.StatusNotFound, "Upload not found.")
		return
	case err != nil || offset != len(up.data) || !strings.HasPrefix(command, "upload"):
		st.mu.Unlock()
		uploadError(http.StatusBadRequest, "Invalid upload offset or command.")
		return
	}
	up.data = append(up.data, body...)
	if !strings.Contains(command, "finalize") {
		st.mu.Unlock()
		h := w.Header()
		setDefaultHeaders(h)
		h.Set("X-Goog-Upload-Status", "active")
		h.Set("Content-Length", "0")
		w.WriteHeader(http.StatusOK)
		return
	}
	delete(st.uploads, id)
	name := "files/" + fakeID(12)
	file := &fakeFile{name: name, displayName: up.displayName, mime: up.mime, data: up.data, created: time.Now().UTC()}
	st.files[name] = file
	st.counts.Uploads++
	st.mu.Unlock()
	f.write(w, marshal(map[string]any{"file": fileJSON(r, file)}), http.Header{"X-Goog-Upload-Status": {"final"}})
}

func (f *Server) serveFileGet(w http.ResponseWriter, r *http.Request, name string, download bool) {
	st := &f.batch
	st.mu.Lock()
	file, ok := st.files[name]
	media := download || r.URL.Query().Get("alt") == "media"
	if ok && media {
		st.counts.Downloads++
		if file.results {
			st.counts.ResultsFetches++
		}
	}
	st.mu.Unlock()
	if !f.authorized(w, r) {
		return
	}
	if !ok {
		notFound(w)
		return
	}
	if !media {
		f.write(w, marshal(fileJSON(r, file)), nil)
		return
	}
	h := w.Header()
	setDefaultHeaders(h)
	h.Set("Content-Type", file.mime)
	fakekit.Reply(w, http.StatusOK, file.data)
}

func (f *Server) serveFileDelete(w http.ResponseWriter, r *http.Request, name string) {
	st := &f.batch
	fakekit.Bump(&st.mu, &st.counts.FileDeletes)
	if !f.authorized(w, r) {
		return
	}
	st.mu.Lock()
	_, ok := st.files[name]
	delete(st.files, name)
	st.mu.Unlock()
	if !ok {
		notFound(w)
		return
	}
	f.write(w, []byte("{}"), nil)
}

// fileJSON is the File resource; files are kept 48 hours.
func fileJSON(r *http.Request, file *fakeFile) map[string]any {
	sum := sha256.Sum256(file.data)
	source := "UPLOADED"
	if file.results {
		source = "GENERATED"
	}
	m := map[string]any{
		"name":           file.name,
		"displayName":    file.displayName,
		"mimeType":       file.mime,
		"sizeBytes":      strconv.Itoa(len(file.data)),
		"createTime":     file.created.Format(time.RFC3339Nano),
		"updateTime":     file.created.Format(time.RFC3339Nano),
		"expirationTime": file.created.Add(48 * time.Hour).Format(time.RFC3339Nano),
		"sha256Hash":     base64.StdEncoding.EncodeToString(sum[:]),
		"uri":            "http://" + r.Host + "/v1beta/" + file.name,
		"state":          "ACTIVE",
		"source":         source,
	}
	if file.results {
		m["downloadUri"] = "http://" + r.Host + "/download/v1beta/" + file.name + ":download?alt=media"
	}
	return m
}

func signInPage(w http.ResponseWriter) {
	const page = "<!DOCTYPE html>\n<html><head><title>Sign in - Google Accounts</title></head><body>Sign in</body></html>\n"
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=UTF-8")
	fakekit.Reply(w, http.StatusOK, []byte(page))
}
