package config

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A processor's price and day budget load; a budget without a price, a
// negative budget and a batch discount outside [0, 1) are refused at
// their paths.
func TestLoadPriceAndBudget(t *testing.T) {
	t.Parallel()
	const anchor = "    limits: {rpm: 500, tpm: 200000, concurrency: 16}\n"
	with := func(t *testing.T, extra string) string {
		yaml := readExample(t)
		if !strings.Contains(yaml, anchor) {
			t.Fatal("the example has no limits line")
		}
		return strings.Replace(yaml, anchor, anchor+extra, 1)
	}
	dir := writeConfig(t, with(t, "    price: {input_per_mtok: 0.4, output_per_mtok: 1.6, batch_discount: 0.5}\n    budget: {per_day_usd: 25}\n"))
	c, err := Load(filepath.Join(dir, "stet.yaml"), lookup(testEnv()))
	if err != nil {
		t.Fatalf("Load = %v", err)
	}
	pc := c.Processor("openai-us")
	if pc.Price != (Price{InputPerMTok: 0.4, OutputPerMTok: 1.6, BatchDiscount: 0.5}) || pc.Budget.PerDayUSD != 25 {
		t.Errorf("price %+v, budget %+v", pc.Price, pc.Budget)
	}
	const p = "processors[1]"
	for _, tt := range []struct{ name, extra, wantPath, wantReason string }{
		{"a budget without a price", "    budget: {per_day_usd: 25}\n", p + ".budget", "needs price"},
		{"a negative budget", "    price: {input_per_mtok: 1}\n    budget: {per_day_usd: -1}\n", p + ".budget.per_day_usd", "must not be negative"},
		{"a whole discount", "    price: {input_per_mtok: 1, batch_discount: 1}\n", p + ".price.batch_discount", "from 0 up to (not including) 1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			probs := problems(t, with(t, tt.extra), testEnv(), nil)
			i := slices.IndexFunc(probs, func(pr Problem) bool { return pr.Path == tt.wantPath })
			if i < 0 || !strings.Contains(probs[i].Reason, tt.wantReason) {
				t.Errorf("Load problems = %v, want %q at %s", probs, tt.wantReason, tt.wantPath)
			}
		})
	}
}
