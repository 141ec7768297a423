package pipeline

import (
	"slices"
	"testing"
)

// A delivery sharing its report or its webhook-id with one already in the
// group waits for the next group, in its order; a third delivery of one
// report waits for a third group. Without holding back, everything goes in.
func TestGroupHoldsBackConflicts(t *testing.T) {
	t.Parallel()
	req := func(name, report, delivery string) *acceptReq {
		return &acceptReq{traceparent: name, report: report, delivery: delivery}
	}
	arrivals := []*acceptReq{
		req("a1", "a", "1"),
		req("b2", "b", "2"),
		req("a3", "a", "3"), // report a again
		req("c2", "c", "2"), // webhook-id 2 again
		req("a4", "a", "4"), // report a a third time
		req("d5", "d", "5"),
	}
	names := func(rs []*acceptReq) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.traceparent)
		}
		return out
	}
	gather := func(g *group, held []*acceptReq, in []*acceptReq, holdBack bool) []*acceptReq {
		for _, r := range in {
			if holdBack && g.conflicts(r) {
				held = append(held, r)
				continue
			}
			g.add(r)
		}
		return held
	}

	g := &group{}
	g.reset()
	held := gather(g, nil, arrivals, true)
	var groups [][]string
	for len(g.batch) > 0 {
		groups = append(groups, names(g.batch))
		g.reset()
		held = g.take(held, true)
	}
	want := [][]string{{"a1", "b2", "d5"}, {"a3", "c2"}, {"a4"}}
	if !slices.EqualFunc(groups, want, slices.Equal) {
		t.Errorf("groups = %v, want %v", groups, want)
	}
	if len(held) != 0 {
		t.Errorf("still held after the last group: %v", names(held))
	}

	g.reset()
	if held := gather(g, nil, arrivals, false); len(held) != 0 || len(g.batch) != len(arrivals) {
		t.Errorf("without holding back: group of %d, %d held; want %d, 0", len(g.batch), len(held), len(arrivals))
	}
}
