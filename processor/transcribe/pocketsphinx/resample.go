package pocketsphinx

import "math"

// The resampler is a windowed-sinc low-pass filter evaluated at each output
// sample's position in the input (band-limited interpolation). Going down
// (44.1 kHz to 16 kHz) the filter's cutoff moves below the new Nyquist
// frequency, so what the lower rate cannot hold is removed instead of
// folding back as noise the recognizer would try to hear as speech.
const (
	// zeroCrossings is the filter's half-width in zero crossings of the
	// sinc: wider is sharper and slower.
	zeroCrossings = 16
	// cutoff is the pass band as a share of the lower Nyquist frequency,
	// leaving the Kaiser window room to roll off before it.
	cutoff = 0.94
	// kaiserBeta trades the transition width for stop-band rejection
	// (8.6: about 90 dB).
	kaiserBeta = 8.6
	// maxPhases bounds the table of precomputed filter phases; rates whose
	// ratio needs more round each position to the nearest of maxPhases
	// (an error under 1/2000 of an input sample).
	maxPhases = 1024
)

// resample converts samples from rate from to rate to.
func resample(in []float32, from, to int) []float32 {
	if from == to || len(in) == 0 {
		return in
	}
	g := gcd(from, to)
	phases := to / g // distinct positions of an output sample between two input samples
	exact := phases <= maxPhases
	if !exact {
		phases = maxPhases
	}
	fc := cutoff * min(1, float64(to)/float64(from)) // cutoff in cycles per input sample × 2
	half := int(math.Ceil(zeroCrossings / fc))       // taps each side of the position
	table := make([][]float32, phases)
	for p := range table {
		table[p] = kernel(float64(p)/float64(phases), fc, half)
	}

	n := int((int64(len(in))*int64(to) + int64(from) - 1) / int64(from))
	out := make([]float32, n)
	for i := range out {
		pos := int64(i) * int64(from) // in units of 1/to of an input sample
		base := int(pos / int64(to))
		var p int
		if exact {
			p = int(pos%int64(to)) / (to / phases)
		} else {
			p = int(math.Round(float64(pos%int64(to)) / float64(to) * float64(phases)))
			if p == phases {
				base, p = base+1, 0
			}
		}
		taps := table[p]
		var sum float64
		start := base - half + 1
		for k, w := range taps {
			if j := start + k; j >= 0 && j < len(in) {
				sum += float64(w) * float64(in[j])
			}
		}
		out[i] = float32(sum)
	}
	return out
}

// kernel is the filter for a position frac (in [0, 1)) past an input
// sample: the weights of the 2×half input samples from half-1 before it to
// half after it.
func kernel(frac, fc float64, half int) []float32 {
	w := make([]float32, 2*half)
	for k := range w {
		x := float64(k-half+1) - frac // distance of the tap from the position
		w[k] = float32(fc * sinc(fc*x) * kaiser(x/float64(half)))
	}
	return w
}

func sinc(x float64) float64 {
	if x == 0 {
		return 1
	}
	return math.Sin(math.Pi*x) / (math.Pi * x)
}

// kaiser is the Kaiser window at r in [-1, 1]; 0 outside.
func kaiser(r float64) float64 {
	if r <= -1 || r >= 1 {
		return 0
	}
	return besselI0(kaiserBeta*math.Sqrt(1-r*r)) / besselI0(kaiserBeta)
}

// besselI0 is the modified Bessel function of the first kind, order 0, by
// its power series.
func besselI0(x float64) float64 {
	sum, term := 1.0, 1.0
	for k := 1; term > 1e-12*sum; k++ {
		term *= (x / (2 * float64(k))) * (x / (2 * float64(k)))
		sum += term
	}
	return sum
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
