package pocketsphinx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// What the recognizer is fed: the rate its en-us acoustic model was trained
// at, one channel, 16-bit little-endian samples, no header.
const modelRate = 16000

// WAVE format tags this decoder reads.
const (
	formatPCM        = 0x0001
	formatFloat      = 0x0003
	formatALaw       = 0x0006
	formatMuLaw      = 0x0007
	formatExtensible = 0xFFFE // the real tag is in the sub-format GUID
)

// clip is a decoded WAV: mono samples in [-1, 1] at rate Hz.
type clip struct {
	rate    int
	samples []float32
}

func (c clip) seconds() float64 { return float64(len(c.samples)) / float64(c.rate) }

// Errors of decodeWAV. They describe the container, never its content.
var (
	errNotWAV      = errors.New("not a RIFF/WAVE file")
	errNoFormat    = errors.New("WAVE file has no fmt chunk before its data")
	errNoData      = errors.New("WAVE file has no data chunk")
	errWAVEncoding = errors.New("WAVE encoding not supported: want PCM (8, 16, 24 or 32 bit), IEEE float (32 or 64 bit), A-law or mu-law")
)

// waveFormat is a fmt chunk.
type waveFormat struct {
	tag        uint16
	channels   int
	rate       int
	blockAlign int
	bits       int
}

// decodeWAV reads a RIFF/WAVE file of any common encoding, rate and channel
// count and mixes it down to mono. A data chunk whose size overstates what
// the file holds (streamed WAVs write 0 or 0xFFFFFFFF) is read to the end
// of the file; a partial last frame is dropped.
func decodeWAV(b []byte) (clip, error) {
	if len(b) < 12 || string(b[:4]) != "RIFF" || string(b[8:12]) != "WAVE" {
		return clip{}, errNotWAV
	}
	var format *waveFormat
	for rest := b[12:]; len(rest) >= 8; {
		id, size := string(rest[:4]), int64(binary.LittleEndian.Uint32(rest[4:8]))
		rest = rest[8:]
		if id == "data" {
			if format == nil {
				return clip{}, errNoFormat
			}
			if size == 0 || size > int64(len(rest)) {
				size = int64(len(rest))
			}
			return format.decode(rest[:size])
		}
		if size > int64(len(rest)) {
			return clip{}, fmt.Errorf("WAVE chunk %q runs past the end of the file", printable(id))
		}
		if id == "fmt " {
			f, err := parseFormat(rest[:size])
			if err != nil {
				return clip{}, err
			}
			format = &f
		}
		size += size % 2 // chunks are word-aligned
		rest = rest[min(size, int64(len(rest))):]
	}
	return clip{}, errNoData
}

func parseFormat(b []byte) (waveFormat, error) {
	if len(b) < 16 {
		return waveFormat{}, errors.New("WAVE fmt chunk too short")
	}
	f := waveFormat{
		tag:        binary.LittleEndian.Uint16(b[0:2]),
		channels:   int(binary.LittleEndian.Uint16(b[2:4])),
		rate:       int(binary.LittleEndian.Uint32(b[4:8])),
		blockAlign: int(binary.LittleEndian.Uint16(b[12:14])),
		bits:       int(binary.LittleEndian.Uint16(b[14:16])),
	}
	if f.tag == formatExtensible {
		if len(b) < 40 {
			return waveFormat{}, errors.New("WAVE_FORMAT_EXTENSIBLE fmt chunk too short")
		}
		// The sub-format GUID starts with the plain format tag.
		f.tag = binary.LittleEndian.Uint16(b[24:26])
	}
	switch {
	case f.channels < 1 || f.channels > 32:
		return waveFormat{}, fmt.Errorf("WAVE file has %d channels, want 1 to 32", f.channels)
	case f.rate < 1000 || f.rate > 768000:
		return waveFormat{}, fmt.Errorf("WAVE sample rate %d Hz out of range", f.rate)
	case f.blockAlign == 0 || f.blockAlign%f.channels != 0:
		return waveFormat{}, fmt.Errorf("WAVE block align %d does not fit %d channels", f.blockAlign, f.channels)
	}
	// Samples are read by their container width, so 24 valid bits in a
	// 32-bit container read as 32-bit samples.
	width := f.blockAlign / f.channels
	ok := false
	switch f.tag {
	case formatPCM:
		ok = width >= 1 && width <= 4
	case formatFloat:
		ok = width == 4 || width == 8
	case formatALaw, formatMuLaw:
		ok = width == 1
	}
	if !ok || f.bits > 8*width {
		return waveFormat{}, errWAVEncoding
	}
	return f, nil
}

// decode mixes the frames of data down to mono.
func (f waveFormat) decode(data []byte) (clip, error) {
	width := f.blockAlign / f.channels
	frames := len(data) / f.blockAlign
	sample := sampleReader(f.tag, width)
	out := make([]float32, frames)
	scale := 1 / float64(f.channels)
	for i := range out {
		frame := data[i*f.blockAlign:]
		var sum float64
		for ch := range f.channels {
			sum += sample(frame[ch*width:])
		}
		out[i] = float32(sum * scale)
	}
	return clip{rate: f.rate, samples: out}, nil
}

// sampleReader returns the function that reads one sample of the given
// format tag and container width as a value in [-1, 1].
func sampleReader(tag uint16, width int) func([]byte) float64 {
	switch {
	case tag == formatFloat && width == 4:
		return func(b []byte) float64 { return float64(math.Float32frombits(binary.LittleEndian.Uint32(b))) }
	case tag == formatFloat:
		return func(b []byte) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(b)) }
	case tag == formatMuLaw:
		return func(b []byte) float64 { return float64(muLaw(b[0])) / 32768 }
	case tag == formatALaw:
		return func(b []byte) float64 { return float64(aLaw(b[0])) / 32768 }
	case width == 1: // 8-bit PCM is unsigned
		return func(b []byte) float64 { return (float64(b[0]) - 128) / 128 }
	case width == 2:
		return func(b []byte) float64 { return float64(int16(binary.LittleEndian.Uint16(b))) / (1 << 15) }
	case width == 3:
		return func(b []byte) float64 {
			v := int32(uint32(b[0])<<8|uint32(b[1])<<16|uint32(b[2])<<24) >> 8
			return float64(v) / (1 << 23)
		}
	default:
		return func(b []byte) float64 { return float64(int32(binary.LittleEndian.Uint32(b))) / (1 << 31) }
	}
}

// muLaw expands a G.711 mu-law byte to a 16-bit linear sample.
func muLaw(u byte) int16 {
	u = ^u
	t := (int(u&0x0F)<<3 + 0x84) << ((u >> 4) & 7)
	if u&0x80 != 0 {
		return int16(0x84 - t)
	}
	return int16(t - 0x84)
}

// aLaw expands a G.711 A-law byte to a 16-bit linear sample.
func aLaw(a byte) int16 {
	a ^= 0x55
	t := int(a&0x0F) << 4
	switch exp := (a >> 4) & 7; exp {
	case 0:
		t += 8
	default:
		t = (t + 0x108) << (exp - 1)
	}
	if a&0x80 != 0 {
		return int16(t)
	}
	return int16(-t)
}

// pcm16 converts samples in [-1, 1] to 16-bit little-endian PCM, clipping
// what lies outside.
func pcm16(samples []float32) []byte {
	out := make([]byte, 2*len(samples))
	for i, s := range samples {
		v := math.Round(float64(s) * 32767)
		v = min(max(v, -32768), 32767)
		binary.LittleEndian.PutUint16(out[2*i:], uint16(int16(v)))
	}
	return out
}

// printable keeps a chunk ID fit for an error string.
func printable(id string) string {
	b := []byte(id)
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '?'
		}
	}
	return string(b)
}
