package api

import (
	"net/http"
	"time"
)

// CostsView is GET /v1/costs: what the caller's tenant's processor calls
// cost in a window, by processor or by source (docs/design.md §18).
type CostsView struct {
	Since    string        `json:"since"`
	Until    string        `json:"until"`
	Group    string        `json:"group"`
	TotalUSD float64       `json:"total_usd"`
	Rows     []CostRowView `json:"rows"`
	Currency string        `json:"currency"`
}

// CostRowView is one processor's or source's spend.
type CostRowView struct {
	Key          string  `json:"key"`
	Calls        int     `json:"calls"`
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	CostUSD      float64 `json:"cost_usd"`
	// UnpricedCalls are calls whose processor had no price: their tokens
	// are counted, their cost is not.
	UnpricedCalls int `json:"unpriced_calls"`
}

// costs answers GET /v1/costs?since=&until=&group=processor|source: since
// defaults to the start of the current UTC day, until to now.
func (s *Server) costs(w http.ResponseWriter, r *http.Request) {
	tok := tokenOf(r)
	q := r.URL.Query()
	for k := range q {
		if k != "since" && k != "until" && k != "group" {
			s.problem(w, r, http.StatusBadRequest, "invalid-query", "unknown parameter "+k+" (since, until, group)")
			return
		}
	}
	now := s.clock.Now().UTC()
	since := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	until := now
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"since", &since}, {"until", &until}} {
		if v := q.Get(p.name); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				s.problem(w, r, http.StatusBadRequest, "invalid-query", p.name+" must be an RFC 3339 time")
				return
			}
			*p.dst = t
		}
	}
	if !until.After(since) {
		s.problem(w, r, http.StatusBadRequest, "invalid-query", "until must be after since")
		return
	}
	group := q.Get("group")
	if group == "" {
		group = "processor"
	}
	if group != "processor" && group != "source" {
		s.problem(w, r, http.StatusBadRequest, "invalid-query", "group must be processor or source")
		return
	}
	rows, err := s.db.Costs(r.Context(), tok.Tenant, since, until, group)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := CostsView{Since: since.UTC().Format(time.RFC3339Nano), Until: until.UTC().Format(time.RFC3339Nano), Group: group,
		Currency: "USD", Rows: []CostRowView{}}
	for _, c := range rows {
		out.Rows = append(out.Rows, CostRowView{Key: c.Key, Calls: c.Calls, InputTokens: c.InputTokens, OutputTokens: c.OutputTokens,
			CostUSD: c.CostUSD, UnpricedCalls: c.Unpriced})
		out.TotalUSD += c.CostUSD
	}
	if !s.audit(w, r, "costs.read", "costs", "") {
		return
	}
	writeJSON(w, http.StatusOK, out)
}
