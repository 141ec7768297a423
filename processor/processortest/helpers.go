package processortest

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stetlabs/stet"
)

// update is the -update flag every adapter's golden tests share: with it,
// Golden rewrites the files instead of comparing.
var update = flag.Bool("update", false, "rewrite golden files in testdata")

// Golden compares got with testdata/name; -update rewrites the file.
func Golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run with -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (run with -update if intended):\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// GoldenJSON indents body, which must be JSON, and compares it with
// testdata/name as Golden does.
func GoldenJSON(t *testing.T, name string, body []byte) {
	t.Helper()
	Golden(t, name, Indent(t, body))
}

// Indent returns raw, which must be JSON, indented by two spaces and ending
// in a newline: the form golden files keep.
func Indent(t *testing.T, raw []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		t.Fatalf("body is not JSON: %v\n%s", err, raw)
	}
	buf.WriteByte('\n')
	return buf.Bytes()
}

// AsProcessorError fails the test unless err is a *stet.ProcessorError,
// which it returns; what names the call in the message.
func AsProcessorError(t *testing.T, what string, err error) *stet.ProcessorError {
	t.Helper()
	var pe *stet.ProcessorError
	if !errors.As(err, &pe) {
		t.Fatalf("%s = %v (%T), want a *stet.ProcessorError", what, err, err)
	}
	return pe
}

// RecordingTransport is an http.RoundTripper over http.DefaultTransport
// that keeps the last request URL and the last response's header and body
// the client saw. It is safe for concurrent use.
type RecordingTransport struct {
	mu     sync.Mutex
	url    string
	header http.Header
	body   []byte
}

// RoundTrip sends req and records the answer.
func (rt *RecordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil {
		return nil, err
	}
	rt.mu.Lock()
	rt.url, rt.header, rt.body = req.URL.String(), res.Header.Clone(), body
	rt.mu.Unlock()
	res.Body = io.NopCloser(bytes.NewReader(body))
	return res, nil
}

// Client returns an *http.Client that sends through rt.
func (rt *RecordingTransport) Client() *http.Client { return &http.Client{Transport: rt} }

// Last returns the last request URL and response header and body.
func (rt *RecordingTransport) Last() (url string, header http.Header, body []byte) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.url, rt.header, rt.body
}
