package openaifake

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/fakekit"
)

// testWAV is a silent 16 kHz mono 16-bit WAV of the given length.
func testWAV(seconds float64) []byte {
	data := make([]byte, 2*int(16000*seconds))
	var b bytes.Buffer
	le := func(v any) { _ = binary.Write(&b, binary.LittleEndian, v) }
	b.WriteString("RIFF")
	le(uint32(36 + len(data)))
	b.WriteString("WAVEfmt ")
	le(uint32(16))
	le(uint16(1))
	le(uint16(1))
	le(uint32(16000))
	le(uint32(32000))
	le(uint16(2))
	le(uint16(16))
	b.WriteString("data")
	le(uint32(len(data)))
	b.Write(data)
	return b.Bytes()
}

// form is a transcription request's multipart form: fields in order, then
// the file when filename is set.
type form struct {
	fields   [][2]string
	filename string
	fileType string
	audio    []byte
}

func (f form) encode(t *testing.T) (contentType, body string) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for _, kv := range f.fields {
		if err := w.WriteField(kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	if f.filename != "" {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", `form-data; name="file"; filename="`+f.filename+`"`)
		h.Set("Content-Type", f.fileType)
		part, err := w.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = part.Write(f.audio)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return w.FormDataContentType(), b.String()
}

// validForm is a request for one second of audio as the SDK sends it.
func validForm(audio []byte) form {
	return form{fields: [][2]string{{"model", "gpt-4o-mini-transcribe"}, {"response_format", "json"}}, filename: "audio.wav", fileType: "audio/wav", audio: audio}
}

// transcribe posts f to path with the bearer key (or, with azureKey set,
// api-key) and returns the status, header and body.
func transcribe(t *testing.T, url string, key, azureKey string, f form) (int, http.Header, []byte) {
	t.Helper()
	contentType, body := f.encode(t)
	h := http.Header{"Content-Type": {contentType}}
	if key != "" {
		h.Set("Authorization", "Bearer "+key)
	}
	if azureKey != "" {
		h.Set("api-key", azureKey)
	}
	return fakekit.Send(t, http.MethodPost, url, h, body)
}

func errorCodeOf(t *testing.T, body []byte) (typ, code any) {
	t.Helper()
	var b map[string]any
	if err := json.Unmarshal(body, &b); err != nil {
		t.Fatalf("error body %q is not JSON: %v", body, err)
	}
	return fakekit.ErrorField(b, "type"), fakekit.ErrorField(b, "code")
}

func TestTranscriptionValidatesRequests(t *testing.T) {
	t.Parallel()
	root := newFake(t, Options{}).HTTP.URL()
	audio := testWAV(1)
	with := func(change func(*form)) form { f := validForm(audio); change(&f); return f }
	for _, tc := range []struct {
		name   string
		path   string
		key    string
		form   form
		status int
		code   any // error.code; nil is null
	}{
		{"valid", "/v1/audio/transcriptions", testKey, validForm(audio), 200, nil},
		{"without /v1", "/audio/transcriptions", testKey, validForm(audio), 200, nil},
		{"wrong key", "/v1/audio/transcriptions", "sk-wrong", validForm(audio), 401, "invalid_api_key"},
		{"no file", "/v1/audio/transcriptions", testKey, with(func(f *form) { f.filename = "" }), 400, "missing_required_parameter"},
		{"no model", "/v1/audio/transcriptions", testKey, with(func(f *form) { f.fields = f.fields[1:] }), 400, nil},
		{"unknown extension", "/v1/audio/transcriptions", testKey, with(func(f *form) { f.filename = "audio.aiff" }), 400, nil},
		{"no extension", "/v1/audio/transcriptions", testKey, with(func(f *form) { f.filename = "audio" }), 400, nil},
		{"verbose_json", "/v1/audio/transcriptions", testKey, with(func(f *form) { f.fields[1][1] = "verbose_json" }), 400, "unsupported_value"},
		{"corrupt wav", "/v1/audio/transcriptions", testKey, with(func(f *form) { f.audio = []byte("not audio at all") }), 400, "invalid_value"},
		{"empty file", "/v1/audio/transcriptions", testKey, with(func(f *form) { f.audio = []byte{} }), 400, "invalid_value"},
		{"too short", "/v1/audio/transcriptions", testKey, with(func(f *form) { f.audio = testWAV(0.05) }), 400, "audio_too_short"},
		{"mp3 by name", "/v1/audio/transcriptions", testKey, with(func(f *form) { f.filename, f.fileType = "a.mp3", "audio/mpeg" }), 200, nil},
	} {
		status, header, body := transcribe(t, root+tc.path, tc.key, "", tc.form)
		if status != tc.status {
			t.Errorf("%s: POST = %d %s, want %d", tc.name, status, body, tc.status)
			continue
		}
		if !strings.HasPrefix(header.Get("x-request-id"), "req_") {
			t.Errorf("%s: x-request-id = %q, want req_…", tc.name, header.Get("x-request-id"))
		}
		if status == 200 {
			continue
		}
		if typ, code := errorCodeOf(t, body); typ != "invalid_request_error" || code != tc.code {
			t.Errorf("%s: error type, code = %v, %v; want invalid_request_error, %v", tc.name, typ, code, tc.code)
		}
	}
	// Not multipart at all.
	f := newFake(t, Options{})
	status, _, body := fakekit.Send(t, http.MethodPost, f.URL()+"/audio/transcriptions", http.Header{"Authorization": {"Bearer " + testKey}}, `{"model":"whisper-1"}`)
	if typ, _ := errorCodeOf(t, body); status != 400 || typ != "invalid_request_error" {
		t.Errorf("POST JSON = %d %s, want 400 invalid_request_error", status, body)
	}
}

func TestTranscriptionAnswer(t *testing.T) {
	t.Parallel()
	f := newFake(t, Options{})
	audio := testWAV(2.5)
	status, header, raw := transcribe(t, f.URL()+"/audio/transcriptions", testKey, "", validForm(audio))
	if status != 200 || header.Get("Content-Type") != "application/json" {
		t.Fatalf("POST = %d %s, want 200 application/json", status, header.Get("Content-Type"))
	}
	var body struct {
		Text  string `json:"text"`
		Usage struct {
			Type              string         `json:"type"`
			InputTokens       int            `json:"input_tokens"`
			OutputTokens      int            `json:"output_tokens"`
			TotalTokens       int            `json:"total_tokens"`
			InputTokenDetails map[string]int `json:"input_token_details"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatal(err)
	}
	u := body.Usage
	if body.Text != DefaultTranscript || u.Type != "tokens" || u.InputTokens != 25 || u.InputTokenDetails["audio_tokens"] != 25 ||
		u.OutputTokens <= 0 || u.TotalTokens != u.InputTokens+u.OutputTokens {
		t.Errorf("answer = %s, want the default text and token usage adding up (25 audio tokens for 2.5 s)", raw)
	}

	// whisper-1 bills by the second; text answers plain text.
	w := validForm(audio)
	w.fields[0][1] = "whisper-1"
	_, _, raw = transcribe(t, f.URL()+"/audio/transcriptions", testKey, "", w)
	if !strings.Contains(string(raw), `"usage":{"type":"duration","seconds":3}`) {
		t.Errorf("whisper-1 answer = %s, want duration usage of 3 seconds", raw)
	}
	w.fields[1][1] = "text"
	status, header, raw = transcribe(t, f.URL()+"/audio/transcriptions", testKey, "", w)
	if status != 200 || string(raw) != DefaultTranscript+"\n" || !strings.HasPrefix(header.Get("Content-Type"), "text/plain") {
		t.Errorf("text answer = %d %q %s, want the text in text/plain", status, raw, header.Get("Content-Type"))
	}
}

// TestTranscriptionRecordsAndCounts checks what tests assert on: calls
// counted apart from the chat route's, each request's audio SHA-256 and
// model, and a transcript chosen from the audio.
func TestTranscriptionRecordsAndCounts(t *testing.T) {
	t.Parallel()
	f := newFake(t, Options{})
	f.SetTranscript(func(audio []byte) string { return "heard " + strconv.Itoa(len(audio)) + " bytes" })
	one, two := testWAV(1), testWAV(2)
	f.EnqueueTranscription(Fault{Kind: RateLimit, RetryAfter: "3"})
	var statuses []int
	var texts []string
	for _, audio := range [][]byte{one, one, two} {
		status, header, raw := transcribe(t, f.URL()+"/audio/transcriptions", testKey, "", validForm(audio))
		statuses = append(statuses, status)
		if status == 429 && header.Get("Retry-After") != "3" {
			t.Errorf("429 Retry-After = %q, want 3", header.Get("Retry-After"))
		}
		var body struct{ Text string }
		_ = json.Unmarshal(raw, &body)
		texts = append(texts, body.Text)
	}
	if want := []int{429, 200, 200}; !slices.Equal(statuses, want) {
		t.Errorf("statuses = %v, want %v", statuses, want)
	}
	if want := []string{"", "heard 32044 bytes", "heard 64044 bytes"}; !slices.Equal(texts, want) {
		t.Errorf("texts = %q, want %q", texts, want)
	}
	if n := f.TranscriptionCalls(); n != 3 {
		t.Errorf("TranscriptionCalls() = %d, want 3", n)
	}
	if n := f.Calls(); n != 0 {
		t.Errorf("Calls() = %d, want 0: the chat route counts its own", n)
	}
	reqs := f.Transcriptions()
	if len(reqs) != 3 {
		t.Fatalf("Transcriptions() = %d requests, want 3", len(reqs))
	}
	for i, want := range []string{stet.SHA256Hex(one), stet.SHA256Hex(one), stet.SHA256Hex(two)} {
		r := reqs[i]
		if r.AudioSHA256 != want || r.Model != "gpt-4o-mini-transcribe" || r.Filename != "audio.wav" || r.FileContentType != "audio/wav" || r.ResponseFormat != "json" {
			t.Errorf("Transcriptions()[%d] = %+v, want sha %s of gpt-4o-mini-transcribe audio.wav audio/wav json", i, r, want)
		}
	}
	// The chat route's queue is not the transcription route's.
	f.Enqueue(Fault{Kind: ServerError})
	if status, _, _ := transcribe(t, f.URL()+"/audio/transcriptions", testKey, "", validForm(one)); status != 200 {
		t.Errorf("transcription after a chat fault was queued = %d, want 200", status)
	}
	if status, _, _ := post(t, f.URL()+"/chat/completions", testKey, validBody); status != 500 {
		t.Errorf("chat call = %d, want its queued 500", status)
	}
}

func TestTranscriptionFaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		fault  Fault
		status int
		code   any
	}{
		{Fault{Kind: Quota}, 429, "insufficient_quota"},
		{Fault{Kind: Unauthorized}, 401, "invalid_api_key"},
		{Fault{Kind: ServerError, Status: 503}, 503, nil},
		{Fault{Kind: HTTPError, Status: 400, Code: "audio_too_short"}, 400, "audio_too_short"},
		{Fault{Kind: Refusal}, 500, nil}, // no meaning on this route
	} {
		f := newFake(t, Options{})
		f.EnqueueTranscription(tc.fault)
		status, _, body := transcribe(t, f.URL()+"/audio/transcriptions", testKey, "", validForm(testWAV(1)))
		if _, code := errorCodeOf(t, body); status != tc.status || code != tc.code {
			t.Errorf("%s: POST = %d code %v, want %d %v", tc.fault.Kind, status, code, tc.status, tc.code)
		}
	}
	f := newFake(t, Options{})
	f.EnqueueTranscription(Fault{Kind: TruncatedJSON})
	status, _, raw := transcribe(t, f.URL()+"/audio/transcriptions", testKey, "", validForm(testWAV(1)))
	if status != 200 || json.Valid(raw) {
		t.Errorf("truncated answer = %d %s, want 200 with JSON cut short", status, raw)
	}
}

func TestTranscriptionAzure(t *testing.T) {
	t.Parallel()
	f := newFake(t, Options{})
	path := f.HTTP.URL() + "/openai/deployments/my-transcriber/audio/transcriptions"
	for _, tc := range []struct {
		name, query, key string
		status           int
	}{
		{"valid", "?api-version=2025-03-01-preview", testKey, 200},
		{"wrong key", "?api-version=2025-03-01-preview", "wrong", 401},
		{"no api-version", "", testKey, 404},
	} {
		if status, _, body := transcribe(t, path+tc.query, "", tc.key, validForm(testWAV(1))); status != tc.status {
			t.Errorf("Azure %s: POST = %d %s, want %d", tc.name, status, body, tc.status)
		}
	}
}
