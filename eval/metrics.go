package eval

import (
	"math"
	"math/rand/v2"
	"slices"
)

// NoOutput is the predicted class of a document that ended without an
// output (a manual record: repairs exhausted, refusal, …). It is a column
// of every confusion matrix and never a class of its own in the averages.
const NoOutput = "(no output)"

// Interval is a confidence interval.
type Interval struct {
	Low  float64 `json:"low"`
	High float64 `json:"high"`
}

// ClassScore is one class of an enum field.
type ClassScore struct {
	Class string `json:"class"`
	// Support is how many documents are labelled with the class; Predicted
	// how many the processor gave it.
	Support   int     `json:"support"`
	Predicted int     `json:"predicted"`
	Precision float64 `json:"precision"`
	Recall    float64 `json:"recall"`
	F1        float64 `json:"f1"`
}

// EnumScores are the per-class figures of an enum field.
type EnumScores struct {
	Classes []ClassScore `json:"classes"`
	// MacroF1 is the unweighted mean F1 over the classes that were labelled
	// or predicted at least once; a class absent from both says nothing
	// and is left out.
	MacroF1 float64 `json:"macro_f1"`
	// Confusion[i][j] counts documents labelled Labels[i] and predicted
	// Labels[j]; the last column is NoOutput.
	Labels    []string `json:"labels"`
	Confusion [][]int  `json:"confusion"`
}

// ScoreEnum scores predicted against expected for the classes given (the
// schema's enum, in its order). A prediction of NoOutput (or of a value
// outside classes) is wrong for every class and lands in the last column.
// Precision is 0 for a class never predicted, recall 0 for a class never
// labelled, F1 0 when both are 0.
func ScoreEnum(classes, expected, predicted []string) EnumScores {
	col := map[string]int{}
	for i, c := range classes {
		col[c] = i
	}
	labels := append(slices.Clone(classes), NoOutput)
	m := make([][]int, len(classes))
	for i := range m {
		m[i] = make([]int, len(labels))
	}
	for i := range expected {
		r, ok := col[expected[i]]
		if !ok {
			continue // a label outside the schema: counted by accuracy only
		}
		c, ok := col[predicted[i]]
		if !ok {
			c = len(classes)
		}
		m[r][c]++
	}
	s := EnumScores{Labels: labels, Confusion: m}
	var sum float64
	var n int
	for i, c := range classes {
		cs := ClassScore{Class: c}
		tp := m[i][i]
		for j := range classes {
			cs.Support += m[i][j]
			cs.Predicted += m[j][i]
		}
		cs.Support += m[i][len(classes)]
		cs.Precision = ratio(tp, cs.Predicted)
		cs.Recall = ratio(tp, cs.Support)
		if cs.Precision+cs.Recall > 0 {
			cs.F1 = 2 * cs.Precision * cs.Recall / (cs.Precision + cs.Recall)
		}
		if cs.Support > 0 || cs.Predicted > 0 {
			sum += cs.F1
			n++
		}
		s.Classes = append(s.Classes, cs)
	}
	if n > 0 {
		s.MacroF1 = sum / float64(n)
	}
	return s
}

// SetScores are an array field's figures, micro-averaged over documents:
// every labelled element is a chance for recall, every predicted element a
// chance for precision.
type SetScores struct {
	Precision float64 `json:"precision"`
	Recall    float64 `json:"recall"`
	F1        float64 `json:"f1"`
}

// ScoreSets scores predicted sets against expected ones. A nil prediction
// (no output) has no elements: it lowers recall only. Two empty sets agree
// and count for neither.
func ScoreSets(expected, predicted [][]string) SetScores {
	var tp, np, ne int
	for i := range expected {
		want := map[string]bool{}
		for _, e := range expected[i] {
			want[e] = true
		}
		got := map[string]bool{}
		for _, p := range predicted[i] {
			got[p] = true
		}
		ne += len(want)
		np += len(got)
		for p := range got {
			if want[p] {
				tp++
			}
		}
	}
	s := SetScores{Precision: ratio(tp, np), Recall: ratio(tp, ne)}
	if np == 0 && ne == 0 {
		s.Precision, s.Recall = 1, 1 // nothing to find and nothing claimed
	}
	if s.Precision+s.Recall > 0 {
		s.F1 = 2 * s.Precision * s.Recall / (s.Precision + s.Recall)
	}
	return s
}

// Accuracy is the share of true values; 0 for none.
func Accuracy(correct []bool) float64 {
	n := 0
	for _, c := range correct {
		if c {
			n++
		}
	}
	return ratio(n, len(correct))
}

// Resamples is the number of bootstrap resamples behind every interval.
const Resamples = 2000

// BootstrapCI is the percentile bootstrap 95 % interval of the accuracy of
// correct: Resamples resamples with replacement, drawn from a generator
// seeded with seed so the same data always gives the same interval.
func BootstrapCI(correct []bool, seed uint64) Interval {
	n := len(correct)
	if n == 0 {
		return Interval{}
	}
	rng := rand.New(rand.NewPCG(seed, 0x5e7e7a1))
	acc := make([]float64, Resamples)
	for r := range acc {
		k := 0
		for range n {
			if correct[rng.IntN(n)] {
				k++
			}
		}
		acc[r] = float64(k) / float64(n)
	}
	slices.Sort(acc)
	return Interval{Low: Quantile(acc, 0.025), High: Quantile(acc, 0.975)}
}

// Quantile is the q-quantile of sorted values, interpolating linearly
// between the closest ranks; 0 for no values.
func Quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	pos := q * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	return sorted[lo] + (sorted[hi]-sorted[lo])*(pos-float64(lo))
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
