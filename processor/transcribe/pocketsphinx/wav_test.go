package pocketsphinx

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"strconv"
	"testing"
)

// encoding is how encodeWAV writes samples.
type encoding struct {
	name  string
	tag   uint16 // fmt chunk tag; formatExtensible writes the sub-format too
	sub   uint16 // the sub-format's tag
	width int    // container bytes per sample
	bits  int    // bits per sample declared (valid bits for extensible)
}

var (
	pcm8         = encoding{"pcm8", formatPCM, 0, 1, 8}
	pcm16LE      = encoding{"pcm16", formatPCM, 0, 2, 16}
	pcm24        = encoding{"pcm24", formatPCM, 0, 3, 24}
	pcm32        = encoding{"pcm32", formatPCM, 0, 4, 32}
	float32LE    = encoding{"float32", formatFloat, 0, 4, 32}
	float64LE    = encoding{"float64", formatFloat, 0, 8, 64}
	extensible32 = encoding{"extensible24in32", formatExtensible, formatPCM, 4, 24}
)

func itoa(n int) string { return strconv.Itoa(n) }

// encodeWAV writes mono samples as a WAV of the given rate, with every
// channel carrying the same signal.
func encodeWAV(samples []float32, rate, channels int, enc encoding) []byte {
	var data bytes.Buffer
	for _, s := range samples {
		v := min(max(float64(s), -1), 1)
		var b [8]byte
		switch {
		case enc.tag == formatFloat && enc.width == 4:
			binary.LittleEndian.PutUint32(b[:], math.Float32bits(float32(v)))
		case enc.tag == formatFloat:
			binary.LittleEndian.PutUint64(b[:], math.Float64bits(v))
		case enc.width == 1:
			b[0] = byte(math.Round(v*127) + 128)
		case enc.width == 2:
			binary.LittleEndian.PutUint16(b[:], uint16(int16(math.Round(v*32767))))
		case enc.width == 3:
			x := uint32(int32(math.Round(v * 8388607)))
			b[0], b[1], b[2] = byte(x), byte(x>>8), byte(x>>16)
		default:
			binary.LittleEndian.PutUint32(b[:], uint32(int32(math.Round(v*2147483647))))
		}
		for range channels {
			data.Write(b[:enc.width])
		}
	}
	var fmtChunk bytes.Buffer
	le := func(v any) { _ = binary.Write(&fmtChunk, binary.LittleEndian, v) }
	le(enc.tag)
	le(uint16(channels))
	le(uint32(rate))
	le(uint32(rate * channels * enc.width))
	le(uint16(channels * enc.width))
	le(uint16(8 * enc.width))
	if enc.tag == formatExtensible {
		le(uint16(22))       // cbSize
		le(uint16(enc.bits)) // valid bits
		le(uint32(0))        // channel mask
		le(enc.sub)          // sub-format GUID: the tag, then the fixed tail
		fmtChunk.Write([]byte{0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71})
	}
	return riff(chunk("fmt ", fmtChunk.Bytes()), chunk("data", data.Bytes()))
}

func chunk(id string, body []byte) []byte {
	b := append([]byte(id), 0, 0, 0, 0)
	binary.LittleEndian.PutUint32(b[4:], uint32(len(body)))
	b = append(b, body...)
	if len(body)%2 == 1 {
		b = append(b, 0)
	}
	return b
}

func riff(chunks ...[]byte) []byte {
	body := []byte("WAVE")
	for _, c := range chunks {
		body = append(body, c...)
	}
	return chunk("RIFF", body)
}

func fmtBody(tag uint16, channels, rate, blockAlign, bits int) []byte {
	b := make([]byte, 16)
	binary.LittleEndian.PutUint16(b[0:], tag)
	binary.LittleEndian.PutUint16(b[2:], uint16(channels))
	binary.LittleEndian.PutUint32(b[4:], uint32(rate))
	binary.LittleEndian.PutUint32(b[8:], uint32(rate*blockAlign))
	binary.LittleEndian.PutUint16(b[12:], uint16(blockAlign))
	binary.LittleEndian.PutUint16(b[14:], uint16(bits))
	return b
}

// TestDecodeEncodings round-trips a few sample values through every
// encoding and channel count: the mono mix must come back within the
// encoding's precision.
func TestDecodeEncodings(t *testing.T) {
	t.Parallel()
	in := []float32{0, 0.5, -0.5, 0.25, -1, 0.999}
	for _, enc := range []encoding{pcm8, pcm16LE, pcm24, pcm32, float32LE, float64LE, extensible32} {
		for _, channels := range []int{1, 2, 5} {
			got, err := decodeWAV(encodeWAV(in, 8000, channels, enc))
			if err != nil {
				t.Errorf("decodeWAV(%s, %d ch) = %v", enc.name, channels, err)
				continue
			}
			if got.rate != 8000 || len(got.samples) != len(in) {
				t.Errorf("decodeWAV(%s, %d ch) = %d Hz, %d samples; want 8000 Hz, %d", enc.name, channels, got.rate, len(got.samples), len(in))
				continue
			}
			tol := 2.0 / 128 // two steps of the coarsest, 8-bit
			if enc.width > 1 {
				tol = 2.0 / 32768
			}
			for i := range in {
				if d := math.Abs(float64(got.samples[i] - in[i])); d > tol {
					t.Errorf("decodeWAV(%s, %d ch) sample %d = %v, want %v", enc.name, channels, i, got.samples[i], in[i])
				}
			}
		}
	}
}

// TestDecodeMixesChannels checks that channels are averaged, not summed or
// dropped.
func TestDecodeMixesChannels(t *testing.T) {
	t.Parallel()
	frame := make([]byte, 4)
	left, right := int16(16384), int16(-8192) // 0.5, -0.25
	binary.LittleEndian.PutUint16(frame[0:], uint16(left))
	binary.LittleEndian.PutUint16(frame[2:], uint16(right))
	got, err := decodeWAV(riff(chunk("fmt ", fmtBody(formatPCM, 2, 16000, 4, 16)), chunk("data", frame)))
	if err != nil || len(got.samples) != 1 || got.samples[0] != 0.125 {
		t.Errorf("decodeWAV(stereo 0.5, -0.25) = %v, %v; want [0.125]", got.samples, err)
	}
}

func TestG711(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   byte
		mu   int16
		alaw int16
	}{
		{0x00, -32124, -5504},
		{0x80, 32124, 5504},
		{0xFF, 0, 848},
		{0x7F, 0, -848},
		{0xD5, 716, 8},
		{0x55, -716, -8},
		{0xAA, 5372, 32256},
		{0x2A, -5372, -32256},
	} {
		if got := muLaw(tc.in); got != tc.mu {
			t.Errorf("muLaw(%#x) = %d, want %d", tc.in, got, tc.mu)
		}
		if got := aLaw(tc.in); got != tc.alaw {
			t.Errorf("aLaw(%#x) = %d, want %d", tc.in, got, tc.alaw)
		}
	}
	data := []byte{0xFF, 0x80}
	for _, tag := range []uint16{formatMuLaw, formatALaw} {
		got, err := decodeWAV(riff(chunk("fmt ", fmtBody(tag, 1, 8000, 1, 8)), chunk("data", data)))
		if err != nil || len(got.samples) != 2 {
			t.Errorf("decodeWAV(G.711 tag %d) = %v, %v; want 2 samples", tag, got.samples, err)
		}
	}
}

// TestDecodeLayouts covers the container quirks real files have.
func TestDecodeLayouts(t *testing.T) {
	t.Parallel()
	data := make([]byte, 8) // four silent 16-bit mono samples
	mono16 := chunk("fmt ", fmtBody(formatPCM, 1, 16000, 2, 16))
	streamed := chunk("data", data)
	binary.LittleEndian.PutUint32(streamed[4:], 0xFFFFFFFF)
	zeroSize := chunk("data", data)
	binary.LittleEndian.PutUint32(zeroSize[4:], 0)
	for _, tc := range []struct {
		name string
		wav  []byte
		want int // samples
	}{
		{"plain", riff(mono16, chunk("data", data)), 4},
		{"odd LIST chunk before fmt", riff(chunk("LIST", []byte("INFOx")), mono16, chunk("data", data)), 4},
		{"streamed size 0xFFFFFFFF", riff(mono16, streamed), 4},
		{"streamed size 0", riff(mono16, zeroSize), 4},
		{"partial last frame", riff(mono16, chunk("data", data[:7])), 3},
		{"fmt chunk with cbSize", riff(chunk("fmt ", append(fmtBody(formatPCM, 1, 16000, 2, 16), 0, 0)), chunk("data", data)), 4},
	} {
		got, err := decodeWAV(tc.wav)
		if err != nil || len(got.samples) != tc.want {
			t.Errorf("decodeWAV(%s) = %d samples, %v; want %d", tc.name, len(got.samples), err, tc.want)
		}
	}
}

func TestDecodeRefuses(t *testing.T) {
	t.Parallel()
	data := chunk("data", make([]byte, 8))
	for _, tc := range []struct {
		name string
		wav  []byte
		want error // nil: any error
	}{
		{"empty", nil, errNotWAV},
		{"MP3", []byte("ID3\x04\x00\x00\x00\x00\x00\x00\x00\x00"), errNotWAV},
		{"RIFF but AVI", append([]byte("RIFF\x04\x00\x00\x00AVI "), data...), errNotWAV},
		{"no fmt", riff(data), errNoFormat},
		{"no data", riff(chunk("fmt ", fmtBody(formatPCM, 1, 16000, 2, 16))), errNoData},
		{"MPEG in WAV", riff(chunk("fmt ", fmtBody(0x0055, 1, 16000, 1, 0)), data), errWAVEncoding},
		{"ADPCM", riff(chunk("fmt ", fmtBody(0x0002, 1, 16000, 256, 4)), data), errWAVEncoding},
		{"float16", riff(chunk("fmt ", fmtBody(formatFloat, 1, 16000, 2, 16)), data), errWAVEncoding},
		{"bits over container", riff(chunk("fmt ", fmtBody(formatPCM, 1, 16000, 2, 24)), data), errWAVEncoding},
		{"no channels", riff(chunk("fmt ", fmtBody(formatPCM, 0, 16000, 2, 16)), data), nil},
		{"rate 0", riff(chunk("fmt ", fmtBody(formatPCM, 1, 0, 2, 16)), data), nil},
		{"block align not per channel", riff(chunk("fmt ", fmtBody(formatPCM, 2, 16000, 3, 8)), data), nil},
		{"short fmt", riff(chunk("fmt ", make([]byte, 10)), data), nil},
		{"short extensible fmt", riff(chunk("fmt ", fmtBody(formatExtensible, 1, 16000, 2, 16)), data), nil},
		{"chunk past the end", []byte("RIFF\x00\x00\x00\x00WAVELIST\xff\x00\x00\x00abcd"), nil},
	} {
		_, err := decodeWAV(tc.wav)
		if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("decodeWAV(%s) = %v, want %v", tc.name, err, cmpOr(tc.want, "an error"))
		}
	}
}

func cmpOr(err error, s string) any {
	if err != nil {
		return err
	}
	return s
}

func sine(freq float64, rate, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(0.5 * math.Sin(2*math.Pi*freq*float64(i)/float64(rate)))
	}
	return out
}

// TestResample checks the resampler against the signal it should produce:
// a tone in the pass band comes out as the same tone at the new rate, and
// a tone the new rate cannot hold comes out as (almost) silence rather
// than folding back into the band.
func TestResample(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		from, to int
		freq     float64
		pass     bool
	}{
		{"44.1k to 16k, 1 kHz", 44100, 16000, 1000, true},
		{"48k to 16k, 3 kHz", 48000, 16000, 3000, true},
		{"8k to 16k, 1 kHz", 8000, 16000, 1000, true},
		{"odd rate 44099 to 16k, 1 kHz", 44099, 16000, 1000, true},
		{"22050 to 16k, 440 Hz", 22050, 16000, 440, true},
		{"44.1k to 16k, 12 kHz", 44100, 16000, 12000, false},
		{"48k to 16k, 9 kHz", 48000, 16000, 9000, false},
	} {
		in := sine(tc.freq, tc.from, tc.from) // one second
		out := resample(in, tc.from, tc.to)
		if want := (len(in)*tc.to + tc.from - 1) / tc.from; len(out) != want {
			t.Errorf("resample(%s) = %d samples, want %d", tc.name, len(out), want)
			continue
		}
		want := sine(tc.freq, tc.to, len(out))
		edge := tc.to / 50 // the filter's reach into the missing samples beyond the ends
		var worst, energy float64
		for i := edge; i < len(out)-edge; i++ {
			worst = max(worst, math.Abs(float64(out[i]-want[i])))
			energy += float64(out[i]) * float64(out[i])
		}
		rms := math.Sqrt(energy / float64(len(out)-2*edge))
		switch {
		case tc.pass && worst > 0.005:
			t.Errorf("resample(%s): worst error %.4f against the ideal tone, want <= 0.005", tc.name, worst)
		case !tc.pass && rms > 0.0005:
			t.Errorf("resample(%s): RMS %.5f left of a tone above the new Nyquist, want <= 0.0005", tc.name, rms)
		}
	}
	if got := resample([]float32{0.1, 0.2}, 16000, 16000); len(got) != 2 || got[1] != 0.2 {
		t.Errorf("resample(same rate) = %v, want the input", got)
	}
}

func TestPCM16(t *testing.T) {
	t.Parallel()
	got := pcm16([]float32{0, 1, -1, 1.5, -1.5, 0.5})
	want := []int16{0, 32767, -32767, 32767, -32768, 16384}
	for i, w := range want {
		if v := int16(binary.LittleEndian.Uint16(got[2*i:])); v != w {
			t.Errorf("pcm16 sample %d = %d, want %d", i, v, w)
		}
	}
}
