package openaifake

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/fakekit"
)

// The Server's transcription route: POST /v1/audio/transcriptions (also
// /audio/transcriptions, and Azure OpenAI's
// /openai/deployments/{deployment}/audio/transcriptions with api-key and
// api-version), a multipart form as OpenAI documents it: file (required,
// its name's extension says the format), model (required),
// response_format (json by default, or text), and the optional language
// and prompt. A json answer is {"text", "usage"}: usage by tokens, or, for
// whisper-1, by duration. Errors are the API's error object.
//
// The route has its own fault queue (EnqueueTranscription), of the same
// Fault type, and its own counters: Enqueue, FaultRate, the RPM/TPM limits,
// Calls and Stats stay the chat route's, so a test can fail a
// transcription without touching the extraction that follows it.
// Options.APIKey and Options.Latency apply as on the chat route. Fault
// kinds it answers: RateLimit, Quota, Unauthorized, ServerError, HTTPError,
// Disconnect, Delay, TimeoutAfterAnswer and TruncatedJSON (the answer cut
// in half); other kinds answer 500 naming the kind.
//
// For each request it keeps the SHA-256 of the audio, never the audio.

// DefaultTranscript is what the transcription route answers unless
// SetTranscript says otherwise.
const DefaultTranscript = "The patient reports a dull headache since Tuesday and asks whether to keep taking the new tablets."

// MaxTranscriptionFile is the API's limit on the audio file: 25 MB.
const MaxTranscriptionFile = 25 << 20

// transcriptionFormats are the file extensions the API accepts.
var transcriptionFormats = []string{"flac", "m4a", "mp3", "mp4", "mpeg", "mpga", "oga", "ogg", "wav", "webm"}

// TranscriptionRequest is one request the transcription route decoded.
type TranscriptionRequest struct {
	Model string
	// Filename and FileContentType are the file part's name and
	// Content-Type as sent.
	Filename        string
	FileContentType string
	// AudioSHA256 is the hex SHA-256 of the file part's bytes; AudioBytes
	// their count.
	AudioSHA256    string
	AudioBytes     int
	ResponseFormat string // as sent; "" means json
	Language       string
	Prompt         string
	Header         http.Header
}

// transcriptions is the route's state. The zero value is ready: the
// Server holds one without New setting it up.
type transcriptions struct {
	faults fakekit.Faults[Fault] // scripted only: no random draws

	mu      sync.Mutex
	calls   int
	reqs    []TranscriptionRequest
	respond func(audio []byte) string
}

// EnqueueTranscription scripts faults for the next transcription calls, in
// order; later calls are answered normally.
func (f *Server) EnqueueTranscription(faults ...Fault) { f.audio.faults.Enqueue(faults...) }

// SetTranscript sets what the transcription route answers as the text, a
// function of the audio file's bytes (called concurrently); nil restores
// DefaultTranscript.
func (f *Server) SetTranscript(respond func(audio []byte) string) {
	f.audio.mu.Lock()
	defer f.audio.mu.Unlock()
	f.audio.respond = respond
}

// TranscriptionCalls returns how many requests the transcription route
// received, faulted and refused ones included.
func (f *Server) TranscriptionCalls() int {
	f.audio.mu.Lock()
	defer f.audio.mu.Unlock()
	return f.audio.calls
}

// Transcriptions returns the requests the transcription route decoded, in
// arrival order, faulted and refused ones included.
func (f *Server) Transcriptions() []TranscriptionRequest {
	f.audio.mu.Lock()
	defer f.audio.mu.Unlock()
	out := slices.Clone(f.audio.reqs)
	for i := range out {
		out[i].Header = out[i].Header.Clone()
	}
	return out
}

// isTranscriptionPath reports whether p is the transcription route, at
// OpenAI's path or Azure OpenAI's.
func isTranscriptionPath(p string) bool {
	if p == "/v1/audio/transcriptions" || p == "/audio/transcriptions" {
		return true
	}
	rest, ok := strings.CutPrefix(p, "/openai/deployments/")
	if !ok {
		return false
	}
	dep, tail, ok := strings.Cut(rest, "/")
	return ok && dep != "" && tail == "audio/transcriptions"
}

func (f *Server) serveTranscription(w http.ResponseWriter, r *http.Request) {
	f.audio.mu.Lock()
	f.audio.calls++
	f.audio.mu.Unlock()

	body, readErr := fakekit.ReadBody(r, maxFakeRequest)
	req, audio, formErr := decodeTranscription(r.Header.Get("Content-Type"), body)
	req.Header = r.Header.Clone()
	if formErr == nil {
		f.audio.mu.Lock()
		f.audio.reqs = append(f.audio.reqs, req)
		f.audio.mu.Unlock()
	}
	if !f.HTTP.Sleep(r, f.opts.Latency) {
		return
	}
	if r.Method != http.MethodPost {
		writeAPIError(w, http.StatusNotFound, nil, apiError{Message: "Invalid URL (" + r.Method + " " + r.URL.Path + ")", Type: "invalid_request_error"})
		return
	}
	if !f.transcriptionAuthorized(w, r) {
		return
	}
	switch {
	case readErr != nil || len(body) > maxFakeRequest || errors.Is(formErr, errFileTooLarge):
		writeAPIError(w, http.StatusRequestEntityTooLarge, nil, apiError{
			Message: "Maximum content size limit (" + strconv.Itoa(MaxTranscriptionFile) + ") exceeded.",
			Type:    "invalid_request_error",
		})
		return
	case formErr != nil:
		writeAPIError(w, http.StatusBadRequest, nil, apiError{
			Message: "Invalid request: the body must be multipart/form-data with a file and a model.",
			Type:    "invalid_request_error",
		})
		return
	}
	if e, status, ok := validateTranscription(req, audio); !ok {
		writeAPIError(w, status, nil, e)
		return
	}
	ft, ok := f.audio.faults.Next()
	if !ok {
		f.writeTranscription(w, req, audio, false, nil)
		return
	}
	f.transcriptionFault(w, r, req, audio, ft)
}

// transcriptionAuthorized checks the credential: api-key and api-version on
// Azure's path, a bearer key on OpenAI's.
func (f *Server) transcriptionAuthorized(w http.ResponseWriter, r *http.Request) bool {
	if !strings.HasPrefix(r.URL.Path, "/openai/deployments/") {
		return f.batchAuthorized(w, r)
	}
	if f.opts.APIKey != "" && r.Header.Get("api-key") != f.opts.APIKey {
		writeAPIError(w, http.StatusUnauthorized, nil, apiError{
			Message: "Access denied due to invalid subscription key or wrong API endpoint.",
			Type:    "invalid_request_error", Code: "401"})
		return false
	}
	if r.URL.Query().Get("api-version") == "" {
		writeAPIError(w, http.StatusNotFound, nil, apiError{Message: "Resource not found", Type: "invalid_request_error", Code: "404"})
		return false
	}
	return true
}

var errFileTooLarge = errors.New("file over the size limit")

// decodeTranscription reads the multipart form. The request it returns
// holds what was read even on an error.
func decodeTranscription(contentType string, body []byte) (TranscriptionRequest, []byte, error) {
	var req TranscriptionRequest
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return req, nil, errors.New("not multipart/form-data")
	}
	var audio []byte
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return req, audio, nil
		}
		if err != nil {
			return req, nil, err
		}
		data, err := io.ReadAll(io.LimitReader(part, MaxTranscriptionFile+1))
		if err != nil {
			return req, nil, err
		}
		if len(data) > MaxTranscriptionFile {
			return req, nil, errFileTooLarge
		}
		switch part.FormName() {
		case "file":
			audio = data
			req.Filename = part.FileName()
			req.FileContentType = part.Header.Get("Content-Type")
			req.AudioSHA256 = stet.SHA256Hex(data)
			req.AudioBytes = len(data)
		case "model":
			req.Model = string(data)
		case "response_format":
			req.ResponseFormat = string(data)
		case "language":
			req.Language = string(data)
		case "prompt":
			req.Prompt = string(data)
		}
	}
}

// validateTranscription checks what the API checks before transcribing.
func validateTranscription(req TranscriptionRequest, audio []byte) (apiError, int, bool) {
	bad := func(e apiError) (apiError, int, bool) { return e, http.StatusBadRequest, false }
	ext := strings.TrimPrefix(strings.ToLower(path.Ext(req.Filename)), ".")
	switch {
	case audio == nil:
		return bad(apiError{Message: "Missing required parameter: 'file'.", Type: "invalid_request_error", Param: "file", Code: "missing_required_parameter"})
	case req.Model == "":
		return bad(apiError{Message: "you must provide a model parameter", Type: "invalid_request_error"})
	case !slices.Contains(transcriptionFormats, ext):
		return bad(apiError{Message: "Invalid file format. Supported formats: ['" + strings.Join(transcriptionFormats, "', '") + "']", Type: "invalid_request_error"})
	case req.ResponseFormat != "" && req.ResponseFormat != "json" && req.ResponseFormat != "text":
		return bad(apiError{
			Message: "response_format '" + req.ResponseFormat + "' is not served by this fake; use 'json' or 'text'.",
			Type:    "invalid_request_error", Param: "response_format", Code: "unsupported_value"})
	case len(audio) == 0:
		return bad(corruptAudio())
	}
	if ext == "wav" {
		secs, ok := wavSeconds(audio)
		switch {
		case !ok:
			return bad(corruptAudio())
		case secs < 0.1:
			return bad(apiError{Message: "Audio file is too short. Minimum audio length is 0.1 seconds.", Type: "invalid_request_error", Param: "file", Code: "audio_too_short"})
		}
	}
	return apiError{}, 0, true
}

func corruptAudio() apiError {
	return apiError{Message: "Audio file might be corrupted or unsupported", Type: "invalid_request_error", Param: "file", Code: "invalid_value"}
}

func (f *Server) transcriptionFault(w http.ResponseWriter, r *http.Request, req TranscriptionRequest, audio []byte, ft Fault) {
	switch ft.Kind {
	case RateLimit:
		h := ft.retryHeaders()
		h.Set("x-ratelimit-remaining-requests", "0")
		h.Set("x-ratelimit-reset-requests", "120ms")
		writeAPIError(w, http.StatusTooManyRequests, []http.Header{h, ft.Header}, ft.override(apiError{
			Message: "Rate limit reached for " + req.Model + " in organization org-fake on requests per min (RPM): Limit 500, Used 500, Requested 1. Please try again in 120ms.",
			Type:    "requests",
			Code:    "rate_limit_exceeded",
		}))
	case Disconnect:
		panic(http.ErrAbortHandler)
	case Delay:
		if f.HTTP.Sleep(r, ft.Delay) {
			f.writeTranscription(w, req, audio, false, ft.Header)
		}
	case TimeoutAfterAnswer:
		body, contentType := f.transcriptionBody(req, audio)
		setDefaultHeaders(w.Header())
		w.Header().Set("Content-Type", contentType)
		f.HTTP.HalfAnswer(w, r, http.StatusOK, body, ft.Header)
	case TruncatedJSON:
		f.writeTranscription(w, req, audio, true, ft.Header)
	default: // Quota, Unauthorized, ServerError, HTTPError; 500 for the rest
		status, e := errorAnswer(ft)
		writeAPIError(w, status, []http.Header{ft.Header}, e)
	}
}

// writeTranscription answers 200 with the transcript, cut in half when cut.
func (f *Server) writeTranscription(w http.ResponseWriter, req TranscriptionRequest, audio []byte, cut bool, extra http.Header) {
	body, contentType := f.transcriptionBody(req, audio)
	if cut {
		body = body[:len(body)/2]
	}
	setDefaultHeaders(w.Header())
	w.Header().Set("Content-Type", contentType)
	fakekit.Reply(w, http.StatusOK, body, extra)
}

// transcriptionBody is the answer to req and its content type.
func (f *Server) transcriptionBody(req TranscriptionRequest, audio []byte) ([]byte, string) {
	f.audio.mu.Lock()
	respond := f.audio.respond
	f.audio.mu.Unlock()
	text := DefaultTranscript
	if respond != nil {
		text = respond(audio)
	}
	if req.ResponseFormat == "text" {
		return []byte(text + "\n"), "text/plain; charset=utf-8"
	}
	secs, ok := wavSeconds(audio)
	if !ok {
		secs = float64(len(audio)) / 16000 // a compressed clip at 128 kbit/s
	}
	var usage any
	if req.Model == "whisper-1" {
		// Billed by the second, rounded up.
		usage = struct {
			Type    string  `json:"type"`
			Seconds float64 `json:"seconds"`
		}{"duration", math.Ceil(secs)}
	} else {
		// Token billing: audio tokens (an estimate, ten a second) plus the
		// prompt's text tokens in; the transcript's tokens out.
		audioTokens := max(int(math.Ceil(secs*10)), 1)
		textTokens := tokens(req.Prompt)
		out := tokens(text)
		usage = struct {
			Type              string         `json:"type"`
			InputTokens       int            `json:"input_tokens"`
			InputTokenDetails map[string]int `json:"input_token_details"`
			OutputTokens      int            `json:"output_tokens"`
			TotalTokens       int            `json:"total_tokens"`
		}{"tokens", audioTokens + textTokens, map[string]int{"text_tokens": textTokens, "audio_tokens": audioTokens}, out, audioTokens + textTokens + out}
	}
	return fakekit.Marshal(struct {
		Text  string `json:"text"`
		Usage any    `json:"usage"`
	}{text, usage}), "application/json"
}

// wavSeconds reads a RIFF/WAVE file's duration from its fmt and data
// chunks: the data size (cut to what the file holds, as streamed WAVs
// overstate it) over the byte rate. ok is false when b is no such file.
func wavSeconds(b []byte) (float64, bool) {
	if len(b) < 12 || string(b[:4]) != "RIFF" || string(b[8:12]) != "WAVE" {
		return 0, false
	}
	byteRate := 0
	for rest := b[12:]; len(rest) >= 8; {
		id, size := string(rest[:4]), int(binary.LittleEndian.Uint32(rest[4:8]))
		rest = rest[8:]
		switch {
		case id == "fmt " && size >= 16 && len(rest) >= 16:
			byteRate = int(binary.LittleEndian.Uint32(rest[8:12]))
		case id == "data":
			if byteRate <= 0 {
				return 0, false
			}
			return float64(min(size, len(rest))) / float64(byteRate), true
		}
		size += size % 2 // chunks are word-aligned
		if size > len(rest) {
			return 0, false
		}
		rest = rest[size:]
	}
	return 0, false
}
