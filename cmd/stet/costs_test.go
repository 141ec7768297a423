package main

import (
	"database/sql"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/lab/testdb"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/processor/infrai/infraifake"
	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// withPrice rewrites cfg: the openai-fake processor gets price and, when
// budget is set, a day budget; on PostgreSQL a fresh schema. It returns
// the ledger to count in (nil on SQLite: open it once stet made it).
func withPrice(t *testing.T, cfg *e2eConfig, dialect ledger.Dialect, price, budget string) *sql.DB {
	t.Helper()
	extra := "    price: " + price + "\n"
	if budget != "" {
		extra += "    budget: " + budget + "\n"
	}
	return rewriteConfig(t, cfg, dialect, func(y string) string {
		return strings.Replace(y, "    timeout: 30s\n", "    timeout: 30s\n"+extra, 1)
	})
}

// Costs on the real binary, on each dialect: every attempt's cost_usd is
// the fake's token counts at the configured price; GET /v1/costs adds
// them up, by processor and by source; /metrics carries the same total and
// one time-to-record observation per record.
func TestCostsAddUp(t *testing.T) {
	t.Parallel()
	for _, dialect := range testdb.Dialects() {
		t.Run(string(dialect), func(t *testing.T) {
			t.Parallel()
			fake := openaifake.New(openaifake.Options{APIKey: testOpenAIKey})
			t.Cleanup(fake.Close)
			cfg := writeConfig(t, t.TempDir(), fake.URL())
			withPrice(t, cfg, dialect, "{input_per_mtok: 2.5, output_per_mtok: 10}", "")
			p := startStet(t, cfg, nil)
			var want float64
			for i := 1; i <= 3; i++ {
				status, in, err := postReport(p.base, fmt.Sprintf("msg_cost_%d", i), sample(t, fmt.Sprintf("report-00%d.json", i)))
				if err != nil || status != http.StatusAccepted {
					t.Fatalf("postReport = %d, %v", status, err)
				}
				var job api.JobView
				waitFor(t, 30*time.Second, "the record", p, func() bool {
					getJSON(t, p.base+"/v1/jobs/"+in.JobID, &job)
					return job.ReviewRecordID != nil
				})
				for _, a := range job.Attempts {
					c := (float64(a.InputTokens)*2.5 + float64(a.OutputTokens)*10) / 1e6
					if a.InputTokens == 0 || a.CostUSD == nil || math.Abs(*a.CostUSD-c) > 1e-12 {
						t.Errorf("attempt %d of %s: %d/%d tokens, cost_usd %v, want %g", a.N, in.JobID, a.InputTokens, a.OutputTokens, a.CostUSD, c)
					}
					want += c
				}
			}
			if code, out, _ := runInProcess(t, "inspect", "--config", cfg.Path, testSource+"/report-001"); code != exitOK ||
				!strings.Contains(out, "  cost $0.0") || !strings.Contains(out, "time to record ") {
				t.Errorf("stet inspect = %d\n%s\nwant the job's cost and time to record", code, out)
			}
			var costs api.CostsView
			getJSON(t, p.base+"/v1/costs", &costs)
			if len(costs.Rows) != 1 || costs.Rows[0].Key != "openai-fake" || costs.Rows[0].Calls != 3 || math.Abs(costs.TotalUSD-want) > 1e-12 ||
				costs.Rows[0].UnpricedCalls != 0 {
				t.Errorf("GET /v1/costs = %+v, want openai-fake: 3 calls, %g USD", costs, want)
			}
			getJSON(t, p.base+"/v1/costs?group=source", &costs)
			if len(costs.Rows) != 1 || costs.Rows[0].Key != testSource || math.Abs(costs.TotalUSD-want) > 1e-12 {
				t.Errorf("GET /v1/costs?group=source = %+v, want %s: %g USD", costs, testSource, want)
			}
			if st, body := call(t, http.MethodGet, p.base+"/v1/costs?group=tenant", "", nil); st != http.StatusBadRequest {
				t.Errorf("GET /v1/costs?group=tenant = %d %s, want 400", st, body)
			}
			resp, err := httpClient.Get(p.base + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			m, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var got float64
			var records int
			for _, line := range strings.Split(string(m), "\n") {
				if v, ok := strings.CutPrefix(line, `stet_cost_usd_total{processor="openai-fake"} `); ok {
					fmt.Sscan(v, &got)
				}
				if v, ok := strings.CutPrefix(line, `stet_time_to_record_seconds_count{source="`+testSource+`"} `); ok {
					fmt.Sscan(v, &records)
				}
			}
			if math.Abs(got-want) > 1e-9 || records != 3 {
				t.Errorf("metrics: stet_cost_usd_total %g (want %g), stet_time_to_record_seconds_count %d (want 3)", got, want, records)
			}
		})
	}
}

// A day budget on the real binary, on each dialect: the processor is
// called while the day's spend is under the cap; at the cap it pauses
// itself with a processor.budget_exhausted alert, the next report waits,
// and no call is made past it.
func TestBudgetCapPauses(t *testing.T) {
	t.Parallel()
	for _, dialect := range testdb.Dialects() {
		t.Run(string(dialect), func(t *testing.T) {
			t.Parallel()
			fake := openaifake.New(openaifake.Options{APIKey: testOpenAIKey})
			t.Cleanup(fake.Close)
			cfg := writeConfig(t, t.TempDir(), fake.URL())
			db := withPrice(t, cfg, dialect, "{input_per_mtok: 10, output_per_mtok: 10}", "{per_day_usd: 0.02}")
			p := startStet(t, cfg, nil)
			if db == nil {
				db = openLedgerRO(t, cfg.DBPath)
			}
			// Each call costs its tokens at 10 USD per million, under a
			// cent: calls go on until the day's spend reaches the cap.
			var spent float64
			var calls int
			for i := 1; i <= 9; i++ {
				status, in, err := postReport(p.base, fmt.Sprintf("msg_budget_%d", i), sample(t, fmt.Sprintf("report-00%d.json", i)))
				if err != nil || status != http.StatusAccepted {
					t.Fatalf("postReport = %d, %v", status, err)
				}
				if spent >= 0.02 {
					waitFor(t, 30*time.Second, "the job waiting on the pause", p, func() bool {
						var job api.JobView
						getJSON(t, p.base+"/v1/jobs/"+in.JobID, &job)
						return job.State == "waiting"
					})
					break
				}
				var job api.JobView
				waitFor(t, 30*time.Second, "the record", p, func() bool {
					getJSON(t, p.base+"/v1/jobs/"+in.JobID, &job)
					return job.ReviewRecordID != nil
				})
				calls++
				spent += *job.Attempts[0].CostUSD
			}
			if spent < 0.02 {
				t.Fatalf("9 reports spent %g USD, under the 0.02 cap: the test's prices are too low", spent)
			}
			t.Logf("%d calls spent %g USD before the pause", calls, spent)
			if n := fake.Calls(); n != calls || calls < 2 {
				t.Errorf("provider calls = %d, want %d (2 or more): none past the cap", n, calls)
			}
			if n := count(t, db, `SELECT COUNT(*) FROM dispatch_pauses WHERE scope = 'processor:openai-fake' AND paused_by = 'stet-budget'`); n != 1 {
				t.Errorf("budget pauses = %d, want 1", n)
			}
			if n := count(t, db, `SELECT COUNT(*) FROM alerts WHERE type = 'processor.budget_exhausted' AND resolved_at IS NULL`); n != 1 {
				t.Errorf("open budget alerts = %d, want 1", n)
			}
			time.Sleep(500 * time.Millisecond)
			if n := fake.Calls(); n != calls {
				t.Errorf("provider calls after the pause = %d, want %d", n, calls)
			}
		})
	}
}

// A provider that reports what a call cost (Infrai's metadata.cost_usd)
// is believed over the configured price, on each dialect, for a sync call
// and for a batch item: the attempt's cost_usd is the fake's report, not
// its tokens at the price, and GET /v1/costs adds up the reports.
func TestReportedCostWins(t *testing.T) {
	t.Parallel()
	for _, dialect := range testdb.Dialects() {
		for _, mode := range []string{"sync", "batch"} {
			t.Run(string(dialect)+"/"+mode, func(t *testing.T) {
				t.Parallel()
				fake := infraifake.New(infraifake.Options{APIKey: testOpenAIKey})
				t.Cleanup(fake.Close)
				cfg := writeBatchConfig(t, t.TempDir(), "infrai", fake.URL(), "gpt-4.1-mini", 1)
				rewriteConfig(t, cfg, ledger.SQLite, func(y string) string {
					if mode == "sync" {
						y = strings.Replace(y, "    mode: batch", "    mode: sync", 1)
					}
					return y
				})
				withPrice(t, cfg, dialect, "{input_per_mtok: 2.5, output_per_mtok: 10}", "")
				p := startStet(t, cfg, nil)
				status, in, err := postReport(p.base, "msg_reported_"+mode, sample(t, "report-001.json"))
				if err != nil || status != http.StatusAccepted {
					t.Fatalf("postReport = %d, %v", status, err)
				}
				var job api.JobView
				waitFor(t, 60*time.Second, "the record", p, func() bool {
					getJSON(t, p.base+"/v1/jobs/"+in.JobID, &job)
					return job.ReviewRecordID != nil
				})
				if len(job.Attempts) != 1 {
					t.Fatalf("attempts = %d, want 1", len(job.Attempts))
				}
				a := job.Attempts[0]
				// The fake reports a dollar per million tokens, half that
				// in a batch; the configured price would say otherwise.
				reported := float64(a.InputTokens+a.OutputTokens) / 1e6
				if mode == "batch" {
					reported /= 2
				}
				priced := (float64(a.InputTokens)*2.5 + float64(a.OutputTokens)*10) / 1e6
				if a.InputTokens == 0 || a.CostUSD == nil || math.Abs(*a.CostUSD-reported) > 1e-12 || math.Abs(reported-priced) < 1e-9 {
					t.Errorf("attempt: %d/%d tokens, cost_usd %v, want the reported %g (the price says %g)", a.InputTokens, a.OutputTokens, a.CostUSD, reported, priced)
				}
				var costs api.CostsView
				getJSON(t, p.base+"/v1/costs", &costs)
				if len(costs.Rows) != 1 || costs.Rows[0].Calls != 1 || math.Abs(costs.TotalUSD-reported) > 1e-12 {
					t.Errorf("GET /v1/costs = %+v, want 1 call, %g USD", costs, reported)
				}
			})
		}
	}
}
