package ledger

import (
	"bytes"
	"compress/flate"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/stetlabs/stet/seal"
)

// Compressed columns. The raw provider response (artifacts.raw) is written
// once, read only by rekey, drills and tests, and is mostly the provider's
// JSON boilerplate: it is stored deflated against a preset dictionary of
// that boilerplate (rawDictV1), which takes a typical ~620-byte chat
// completion to ~160 bytes. Compression comes before sealing, since a
// ciphertext does not compress.
//
// The stored forms, each with a version prefix so older rows stay readable:
//   - plaintext: packedPrefix + base64 (no padding) of the deflate stream;
//   - sealed: boundary's sealed format over packedMagic + the deflate stream;
//   - anything else is a value written before compression (or one it would
//     not shrink) and reads as it is.
//
// A new dictionary is a new version (stet:z2:, "\x00z2"); rawDictV1 must
// never change, or the rows written under it no longer read.
const (
	packedPrefix = "stet:z1:"
	packedMagic  = "\x00z1"
)

// rawDictV1 is the deflate dictionary of packed raw responses: the fixed
// parts of the response bodies of the providers stet speaks to, the most
// frequent last (deflate reaches nearer matches more cheaply).
const rawDictV1 = `{"blocklistsMatch":[],"categoriesAnalysis":[{"category":"Hate","severity":0},{"category":"SelfHarm","severity":0},{"category":"Sexual","severity":0},{"category":"Violence","severity":0}]}` +
	`{"candidates":[{"content":{"parts":[{"text":"{\"` + `"}],"role":"model"},"finishReason":"STOP","avgLogprobs":-0.0,"index":0}],"usageMetadata":{"promptTokenCount":,"candidatesTokenCount":,"totalTokenCount":,"promptTokensDetails":[{"modality":"TEXT","tokenCount":}]},"modelVersion":"gemini-","responseId":"` +
	`{"id":"msg_","type":"message","role":"assistant","model":"claude-","content":[{"type":"tool_use","id":"toolu_","name":"","input":{"` + `{"type":"text","text":"{\"` + `"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":,"service_tier":"standard"}}` +
	`{"id":"batch_req_","custom_id":"","response":{"status_code":200,"request_id":"","body":` + `},"error":null}` +
	`{"id":"chatcmpl-","object":"chat.completion","created":,"model":"","choices":[{"index":0,"message":{"role":"assistant","content":"{\"` + `\"}","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":,"completion_tokens":,"total_tokens":,"prompt_tokens_details":{"audio_tokens":0,"cached_tokens":0},"completion_tokens_details":{"accepted_prediction_tokens":0,"audio_tokens":0,"reasoning_tokens":0,"rejected_prediction_tokens":0}},"service_tier":"default","system_fingerprint":"fp_`

var b64 = base64.RawStdEncoding

// deflaters pools the writers: a new one allocates ~800 KB and costs
// ~0.5 ms; a reset one (which keeps its dictionary) ~30 µs per response.
var deflaters = sync.Pool{New: func() any {
	w, err := flate.NewWriterDict(nil, flate.BestCompression, []byte(rawDictV1))
	if err != nil {
		panic(err) // only for an invalid level
	}
	return w
}}

func deflate(b []byte) []byte {
	var buf bytes.Buffer
	w := deflaters.Get().(*flate.Writer)
	w.Reset(&buf)
	w.Write(b) // a bytes.Buffer does not fail
	w.Close()
	deflaters.Put(w)
	return buf.Bytes()
}

// maxInflated bounds what one packed value inflates to: twice the largest
// answer a processor client reads (processor.MaxResponseBytes, 32 MiB, and
// a batch results line no longer), so every raw response stet stored reads
// back, while a corrupt or forged row (deflate expands up to about 1000
// to 1) cannot take the memory of the process that reads it.
const maxInflated = 64 << 20

// errInflatedTooLarge is the error of a packed value that inflates past
// its bound.
var errInflatedTooLarge = errors.New("inflate: packed value inflates past the size limit")

func inflate(b []byte) ([]byte, error) { return inflateMax(b, maxInflated) }

// inflateMax inflates b, reading at most limit bytes of output: more is
// errInflatedTooLarge.
func inflateMax(b []byte, limit int64) ([]byte, error) {
	r := flate.NewReaderDict(bytes.NewReader(b), []byte(rawDictV1))
	defer r.Close()
	out, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("inflate: %w", err)
	}
	if int64(len(out)) > limit {
		return nil, errInflatedTooLarge
	}
	return out, nil
}

// packRaw is the stored form of a raw response of artifact rowID: deflated,
// then sealed under dk (nil: encryption off). A value compression would not
// shrink is stored as it is, unless it could be mistaken for a packed one.
func packRaw(dk *seal.DataKey, rowID string, raw []byte) (string, error) {
	if len(raw) == 0 {
		return "", nil
	}
	z := deflate(raw)
	if dk != nil {
		return dk.Seal(append([]byte(packedMagic), z...), bind(colArtifactRaw, rowID))
	}
	v := packedPrefix + b64.EncodeToString(z)
	if len(v) >= len(raw) && !strings.HasPrefix(string(raw), packedPrefix) {
		return string(raw), nil
	}
	return v, nil
}

// unpack returns the value a packed column held: v is what the column
// stored, or what its seal opened to (sealed). The plaintext form is read
// inside a seal too, though rekey (sealStored) seals the binary form.
func unpack(v string, sealed bool) (string, error) {
	var z []byte
	switch {
	case sealed && strings.HasPrefix(v, packedMagic):
		z = []byte(v[len(packedMagic):])
	case strings.HasPrefix(v, packedPrefix):
		var err error
		if z, err = b64.DecodeString(v[len(packedPrefix):]); err != nil {
			return "", fmt.Errorf("packed value: %w", err)
		}
	default:
		return v, nil
	}
	b, err := inflate(z)
	return string(b), err
}

// packed reports whether column col (table.column) is stored packed.
func packed(col string) bool { return col == colArtifactRaw }

// sealStored seals a stored plaintext value of column col for rekey: a
// packed value is sealed in its binary form, so it does not carry base64
// twice.
func sealStored(dk *seal.DataKey, col, rowID string, v sql.NullString) (sql.NullString, error) {
	if dk == nil || !v.Valid || !packed(col) || !strings.HasPrefix(v.String, packedPrefix) {
		return sealValue(dk, col, rowID, v)
	}
	z, err := b64.DecodeString(v.String[len(packedPrefix):])
	if err != nil {
		return sql.NullString{}, fmt.Errorf("%s of %s: packed value: %w", col, rowID, err)
	}
	s, err := dk.Seal(append([]byte(packedMagic), z...), bind(col, rowID))
	if err != nil {
		return sql.NullString{}, err
	}
	return sql.NullString{String: s, Valid: true}, nil
}
