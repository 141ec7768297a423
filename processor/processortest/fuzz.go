package processortest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/textproto"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
)

// FuzzCanary is the marker fuzz seeds carry in provider messages, refusals
// and model output. It has a space, so no filter of machine codes keeps it:
// it may reach an error's text only by copying what the provider said.
const FuzzCanary = "Jane Roe"

// FuzzExtract is the fuzz target of an adapter's response decoder and error
// classifier: every input is one answer (a status, header lines, a body)
// to one Extract, given by a transport without a server. Whatever the
// answer, Extract must not panic; it succeeds with JSON output, or fails
// with a *stet.ProcessorError of a known class whose RetryAfter is within
// processor.MaxRetryAfter; and no error text (the error's or its cause's)
// carries FuzzCanary. The seed corpus is testdata/fuzz/<FuzzName>/, which
// WriteFuzzSeeds writes from the fake's own answers.
func FuzzExtract(f *testing.F, h Harness) {
	f.Fuzz(func(t *testing.T, status int, header string, body []byte) {
		if status < 200 || status > 599 {
			status = 200 + abs(status)%400
		}
		hdr := parseHeader(header)
		c := h.Common
		if c.BaseURL == "" {
			c.BaseURL = "http://127.0.0.1:1" // never dialled: the transport answers
		}
		c.HTTPClient = &http.Client{Transport: replyTransport{status: status, header: hdr, body: body}}
		p, err := h.Open(c)
		if err != nil {
			t.Fatalf("Open() = %v", err)
		}
		ext, err := p.Extract(t.Context(), h.params("Classify: "+Canary))
		CheckOutcome(t, ext, err)
	})
}

// CheckOutcome checks one call's outcome as FuzzExtract does.
func CheckOutcome(t *testing.T, ext *stet.Extraction, err error) {
	t.Helper()
	if err == nil {
		if ext == nil || !json.Valid(ext.Output) {
			t.Fatalf("Extract() = %+v, nil error; want JSON output", ext)
		}
		return
	}
	var pe *stet.ProcessorError
	if !errors.As(err, &pe) {
		t.Fatalf("Extract() = %v (%T), want a *stet.ProcessorError", err, err)
	}
	if !pe.Class.Valid() {
		t.Fatalf("Extract(): class %q is not a failure class", pe.Class)
	}
	if pe.RetryAfter < 0 || pe.RetryAfter > processor.MaxRetryAfter {
		t.Fatalf("Extract(): RetryAfter = %v, want 0…%v", pe.RetryAfter, processor.MaxRetryAfter)
	}
	// pe.Err, the internal cause, may hold provider text and is never
	// logged (stet.ProcessorError); what is shown or logged must not.
	texts := append([]string{err.Error(), fmt.Sprintf("%+v", err), pe.Code, pe.RequestID}, pe.Problems...)
	for _, s := range texts {
		if strings.Contains(s, FuzzCanary) {
			t.Fatalf("Extract(): error text, code, request ID or problem %q carries the canary", s)
		}
	}
}

func abs(n int) int {
	if n < 0 {
		if n = -n; n < 0 {
			return 0
		}
	}
	return n
}

// parseHeader reads "Name: value" lines; what is not a header line is
// skipped.
func parseHeader(s string) http.Header {
	r := textproto.NewReader(bufio.NewReader(strings.NewReader(strings.TrimRight(s, "\r\n") + "\r\n\r\n")))
	h, err := r.ReadMIMEHeader()
	if err != nil && len(h) == 0 {
		return http.Header{}
	}
	return http.Header(h)
}

// replyTransport answers every request with one response, reading the
// request body first as a server would.
type replyTransport struct {
	status int
	header http.Header
	body   []byte
}

func (rt replyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	return &http.Response{
		Status: http.StatusText(rt.status), StatusCode: rt.status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: rt.header.Clone(), Body: io.NopCloser(bytes.NewReader(rt.body)), ContentLength: int64(len(rt.body)), Request: req,
	}, nil
}

// WriteFuzzSeeds, under -update, writes the seed corpus of FuzzExtract to
// testdata/fuzz/<name>/: the fake's answer to one Extract for every Fault
// kind the provider has (error messages and refusals carrying
// FuzzCanary), and the answers of ExerciseOffWire's kind (a proxy page, a
// captive portal). Without -update it checks that the corpus exists.
func WriteFuzzSeeds(t *testing.T, h Harness, name string) {
	t.Helper()
	dir := filepath.Join("testdata", "fuzz", name)
	if !*update {
		if entries, err := os.ReadDir(dir); err != nil || len(entries) == 0 {
			t.Fatalf("no seed corpus in %s (run go test -run %s -update)", dir, t.Name())
		}
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	faults := []Fault{"", RateLimit, Quota, Auth, ServerError, Truncated, SchemaInvalid, Refusal}
	for _, fault := range faults {
		if _, ok := h.Lacks[fault]; ok {
			continue
		}
		f := h.Start(t)
		if fault != "" {
			f.Enqueue(Script{Fault: fault, RetryAfter: "7", Message: "about " + FuzzCanary + " " + Canary})
		}
		rec := &statusRecorder{}
		c := h.Common
		c.BaseURL = f.URL
		c.HTTPClient = &http.Client{Transport: rec}
		p, err := h.Open(c)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = p.Extract(t.Context(), h.params("Classify: "+Canary))
		if rec.status == 0 {
			t.Fatalf("%s: no answer recorded", fault)
		}
		var hb strings.Builder
		for _, k := range slices.Sorted(maps.Keys(rec.header)) {
			if k == "Date" || k == "Content-Length" {
				continue
			}
			for _, v := range rec.header[k] {
				fmt.Fprintf(&hb, "%s: %s\n", k, v)
			}
		}
		kind := string(fault)
		if kind == "" {
			kind = "answer"
		}
		seed := fmt.Sprintf("go test fuzz v1\nint(%d)\nstring(%q)\n[]byte(%q)\n", rec.status, hb.String(), rec.body)
		if err := os.WriteFile(filepath.Join(dir, kind), []byte(seed), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for kind, seed := range map[string]string{
		"proxy_502":      fmt.Sprintf("go test fuzz v1\nint(502)\nstring(%q)\n[]byte(%q)\n", "Content-Type: text/html\n", "<html>502 "+FuzzCanary+"</html>"),
		"captive_portal": fmt.Sprintf("go test fuzz v1\nint(200)\nstring(%q)\n[]byte(%q)\n", "Content-Type: text/html\n", "<html>portal</html>"),
		"retry_after_ms": fmt.Sprintf("go test fuzz v1\nint(429)\nstring(%q)\n[]byte(%q)\n", "Retry-After-Ms: 99999999999\nRetry-After: Wed, 21 Oct 2099 07:28:00 GMT\n", "{}"),
	} {
		if err := os.WriteFile(filepath.Join(dir, kind), []byte(seed), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// statusRecorder is a RecordingTransport that also keeps the status.
type statusRecorder struct {
	status int
	header http.Header
	body   []byte
}

func (rt *statusRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil {
		return nil, err
	}
	rt.status, rt.header, rt.body = res.StatusCode, res.Header.Clone(), body
	res.Body = io.NopCloser(bytes.NewReader(body))
	return res, nil
}
