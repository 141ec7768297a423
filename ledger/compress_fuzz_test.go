package ledger

import (
	"bytes"
	"compress/flate"
	"errors"
	"strings"
	"testing"
)

// A packed raw response that inflates past maxInflated is refused after
// reading at most maxInflated+1 bytes: before, any row inflated in full in
// the process that read it, and deflate reaches about 1000 to 1 (80 KiB of
// deflated zeros here are 64 MiB).
func TestUnpackRefusesDeflateBomb(t *testing.T) {
	t.Parallel()
	bomb := deflatedZeros(t, maxInflated+1)
	if len(bomb) > 1<<20 {
		t.Fatalf("the bomb deflates to %d bytes, want a small one", len(bomb))
	}
	if out, err := unpack(packedPrefix+b64.EncodeToString(bomb), false); !errors.Is(err, errInflatedTooLarge) || out != "" {
		t.Errorf("unpack(bomb) = %d bytes, %v; want nothing and errInflatedTooLarge", len(out), err)
	}
	// The bound is inclusive.
	const limit = 4096
	for _, tt := range []struct {
		n    int
		want error
	}{{limit, nil}, {limit + 1, errInflatedTooLarge}} {
		if out, err := inflateMax(deflatedZeros(t, tt.n), limit); !errors.Is(err, tt.want) || (err == nil && len(out) != tt.n) {
			t.Errorf("inflateMax(%d zero bytes, %d) = %d bytes, %v; want error %v", tt.n, limit, len(out), err, tt.want)
		}
	}
}

// deflatedZeros is a deflate stream of n zero bytes, written fast.
func deflatedZeros(t *testing.T, n int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := flate.NewWriter(&buf, flate.BestSpeed)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for ; n > 0; n -= len(chunk) {
		if _, err := w.Write(chunk[:min(n, len(chunk))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// fuzzInflateLimit is the bound FuzzInflate inflates under, small enough
// that a bomb costs the fuzzer nothing.
const fuzzInflateLimit = 64 << 10

// FuzzInflate: the raw-response decompressor never panics and never
// returns more than its bound; past the bound it fails with
// errInflatedTooLarge, and a larger bound then reads more (or fails); what
// it returns is what a larger bound returns too, and packs and unpacks
// back to itself.
func FuzzInflate(f *testing.F) {
	chat := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4.1-mini","choices":[{"index":0,"message":{"role":"assistant","content":"{\"category\":\"ok\"}","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}}`)
	f.Add(deflate(chat))
	f.Add(deflate(nil))
	f.Add(deflate(make([]byte, fuzzInflateLimit+1))) // just past the bound
	f.Add(deflate(bytes.Repeat([]byte("stet"), 4096)))
	f.Add(deflate(chat)[:10]) // cut
	f.Add([]byte("not deflate at all"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, z []byte) {
		out, err := inflateMax(z, fuzzInflateLimit)
		if len(out) > fuzzInflateLimit {
			t.Fatalf("inflateMax(%d bytes) = %d bytes, over the bound %d", len(z), len(out), fuzzInflateLimit)
		}
		if errors.Is(err, errInflatedTooLarge) {
			if more, err := inflateMax(z, 2*fuzzInflateLimit); err == nil && len(more) <= fuzzInflateLimit {
				t.Fatalf("inflateMax refused %d bytes as too large; a larger bound reads only %d", len(z), len(more))
			}
			return
		}
		if err != nil {
			if out != nil {
				t.Fatalf("inflateMax = %d bytes beside error %v", len(out), err)
			}
			return
		}
		if full, err := inflate(z); err != nil || !bytes.Equal(full, out) {
			t.Fatalf("inflate under maxInflated = %d bytes, %v; under %d: %d bytes", len(full), err, fuzzInflateLimit, len(out))
		}
		if len(out) == 0 {
			return // packRaw stores nothing for an empty response
		}
		v, err := packRaw(nil, "art_1", out)
		if err != nil {
			t.Fatalf("packRaw = %v", err)
		}
		back, err := unpack(v, false)
		if err != nil || back != string(out) {
			t.Fatalf("unpack(packRaw(%d bytes)) = %d bytes, %v; want them back", len(out), len(back), err)
		}
		if !strings.HasPrefix(v, packedPrefix) && v != string(out) {
			t.Fatalf("packRaw stored neither the packed form nor the value itself")
		}
	})
}
