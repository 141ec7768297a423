package eval

import (
	"math"
	"slices"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// A 3-class table worked by hand:
//
//	expected  a a a b b c
//	predicted a a b b - a      (- is no output)
//
// a: TP 2, predicted 3 (two a, one c→a), support 3 → P 2/3, R 2/3, F1 2/3
// b: TP 1, predicted 2, support 2 → P 1/2, R 1/2, F1 1/2
// c: TP 0, predicted 0, support 1 → P 0, R 0, F1 0
// d: never labelled, never predicted → left out of the macro average
// macro-F1 = (2/3 + 1/2 + 0) / 3 = 7/18
func TestScoreEnumHandTable(t *testing.T) {
	t.Parallel()
	classes := []string{"a", "b", "c", "d"}
	s := ScoreEnum(classes,
		[]string{"a", "a", "a", "b", "b", "c"},
		[]string{"a", "a", "b", "b", NoOutput, "a"})
	want := []ClassScore{
		{Class: "a", Support: 3, Predicted: 3, Precision: 2.0 / 3, Recall: 2.0 / 3, F1: 2.0 / 3},
		{Class: "b", Support: 2, Predicted: 2, Precision: 0.5, Recall: 0.5, F1: 0.5},
		{Class: "c", Support: 1, Predicted: 0},
		{Class: "d"},
	}
	for i, w := range want {
		g := s.Classes[i]
		if g.Class != w.Class || g.Support != w.Support || g.Predicted != w.Predicted ||
			!near(g.Precision, w.Precision) || !near(g.Recall, w.Recall) || !near(g.F1, w.F1) {
			t.Errorf("ScoreEnum class %s = %+v, want %+v", w.Class, g, w)
		}
	}
	if !near(s.MacroF1, 7.0/18) {
		t.Errorf("ScoreEnum macro-F1 = %v, want 7/18", s.MacroF1)
	}
	wantM := [][]int{
		{2, 1, 0, 0, 0},
		{0, 1, 0, 0, 1},
		{1, 0, 0, 0, 0},
		{0, 0, 0, 0, 0},
	}
	for i := range wantM {
		if !slices.Equal(s.Confusion[i], wantM[i]) {
			t.Errorf("confusion row %s = %v, want %v", classes[i], s.Confusion[i], wantM[i])
		}
	}
	if got := s.Labels[len(s.Labels)-1]; got != NoOutput {
		t.Errorf("last confusion column = %q, want %q", got, NoOutput)
	}
}

// All wrong: every class scores 0, and so does the macro average; a class
// only ever predicted (never labelled) counts in the average with F1 0.
func TestScoreEnumAllWrong(t *testing.T) {
	t.Parallel()
	s := ScoreEnum([]string{"x", "y", "z"}, []string{"x", "x", "y"}, []string{"y", "z", "x"})
	for _, c := range s.Classes {
		if c.Precision != 0 || c.Recall != 0 || c.F1 != 0 {
			t.Errorf("all wrong: class %s = %+v, want zeros", c.Class, c)
		}
	}
	if s.MacroF1 != 0 {
		t.Errorf("all wrong: macro-F1 = %v, want 0", s.MacroF1)
	}
	if z := s.Classes[2]; z.Support != 0 || z.Predicted != 1 {
		t.Errorf("class z = %+v, want support 0, predicted 1", z)
	}
}

func TestScoreEnumEmpty(t *testing.T) {
	t.Parallel()
	s := ScoreEnum([]string{"a", "b"}, nil, nil)
	if s.MacroF1 != 0 || s.Classes[0].Support != 0 || len(s.Confusion) != 2 {
		t.Errorf("ScoreEnum(no documents) = %+v, want zeros and a 2-row matrix", s)
	}
	// Perfect on one class, the other absent: macro-F1 is that class's 1.
	s = ScoreEnum([]string{"a", "b"}, []string{"a", "a"}, []string{"a", "a"})
	if s.MacroF1 != 1 {
		t.Errorf("ScoreEnum(perfect, one class) macro-F1 = %v, want 1 (b left out)", s.MacroF1)
	}
}

// Sets: expected {a,b} {} {c} {a}; predicted {a} {b} {c} nil(no output).
// TP = a + c = 2; predicted elements 3; expected elements 4.
// P = 2/3, R = 1/2, F1 = 2·(2/3)(1/2)/(2/3+1/2) = 4/7.
func TestScoreSetsHandTable(t *testing.T) {
	t.Parallel()
	s := ScoreSets([][]string{{"a", "b"}, {}, {"c"}, {"a"}}, [][]string{{"a"}, {"b"}, {"c"}, nil})
	if !near(s.Precision, 2.0/3) || !near(s.Recall, 0.5) || !near(s.F1, 4.0/7) {
		t.Errorf("ScoreSets = %+v, want P 2/3, R 1/2, F1 4/7", s)
	}
	if s := ScoreSets([][]string{{"a"}}, [][]string{{"b"}}); s.Precision != 0 || s.Recall != 0 || s.F1 != 0 {
		t.Errorf("ScoreSets(all wrong) = %+v, want zeros", s)
	}
	if s := ScoreSets([][]string{{}, {}}, [][]string{{}, {}}); s.F1 != 1 {
		t.Errorf("ScoreSets(all empty, all agree) = %+v, want F1 1", s)
	}
}

func TestAccuracyAndBootstrap(t *testing.T) {
	t.Parallel()
	correct := make([]bool, 200)
	for i := range 150 {
		correct[i] = true
	}
	if got := Accuracy(correct); got != 0.75 {
		t.Fatalf("Accuracy = %v, want 0.75", got)
	}
	ci := BootstrapCI(correct, 7)
	// The normal approximation: 0.75 ± 1.96·sqrt(0.75·0.25/200) = ±0.060.
	if ci.Low > 0.75 || ci.High < 0.75 || ci.Low < 0.68 || ci.High > 0.82 {
		t.Errorf("BootstrapCI(150/200) = %+v, want about [0.69, 0.81]", ci)
	}
	if again := BootstrapCI(correct, 7); again != ci {
		t.Errorf("BootstrapCI not reproducible: %+v then %+v", ci, again)
	}
	if ci := BootstrapCI([]bool{true, true, true}, 1); ci.Low != 1 || ci.High != 1 {
		t.Errorf("BootstrapCI(all right) = %+v, want [1, 1]", ci)
	}
	if ci := BootstrapCI([]bool{false, false}, 1); ci.Low != 0 || ci.High != 0 {
		t.Errorf("BootstrapCI(all wrong) = %+v, want [0, 0]", ci)
	}
	if Accuracy(nil) != 0 || BootstrapCI(nil, 1) != (Interval{}) {
		t.Error("Accuracy/BootstrapCI of nothing should be zero")
	}
}

func TestQuantile(t *testing.T) {
	t.Parallel()
	v := []float64{10, 20, 30, 40, 50}
	for _, tt := range []struct{ q, want float64 }{{0, 10}, {0.5, 30}, {0.95, 48}, {1, 50}, {0.25, 20}} {
		if got := Quantile(v, tt.q); !near(got, tt.want) {
			t.Errorf("Quantile(%v, %v) = %v, want %v", v, tt.q, got, tt.want)
		}
	}
	if Quantile(nil, 0.5) != 0 {
		t.Error("Quantile(nil) should be 0")
	}
}
