package ledger_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet/ledger"
)

// A chat completion as a provider returns it: the raw response stored packed.
const chatRaw = `{"id":"chatcmpl-WCCEKWAKHX7AROYRPUXQNAT5DC","object":"chat.completion","created":1796176419,"model":"fake-instant","choices":[{"index":0,"message":{"role":"assistant","content":"{\"category\":\"none\",\"severity\":\"none\"}","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":66,"completion_tokens":10,"total_tokens":76,"prompt_tokens_details":{"audio_tokens":0,"cached_tokens":0},"completion_tokens_details":{"accepted_prediction_tokens":0,"audio_tokens":0,"reasoning_tokens":0,"rejected_prediction_tokens":0}},"service_tier":"default","system_fingerprint":"fp_fake0000"}`

// rawOf returns the stored raw response of the job's artifact, opened and
// unpacked as the ledger reads it, and the stored value itself.
func rawOf(t *testing.T, db *ledger.DB, reportID, jobID string) (plain, stored string) {
	t.Helper()
	var legacy string
	var sealed bool
	if err := db.Writer().QueryRow(`SELECT COALESCE(legacy_id, ''), raw, (sealed & 1) <> 0 FROM artifacts WHERE job_id = (SELECT id FROM jobs WHERE public_id = $1)`,
		ledger.StoredID(jobID)).Scan(&legacy, &stored, &sealed); err != nil {
		t.Fatal(err)
	}
	plain, err := db.OpenSealed(context.Background(), reportID, "artifacts.raw", ledger.ArtifactID(legacy, jobID), stored, sealed)
	if err != nil {
		t.Fatalf("OpenSealed(artifacts.raw of %s) = %v", jobID, err)
	}
	return plain, stored
}

// A raw response is stored compressed (sealed after compression when
// encryption is on) and reads back byte for byte; one compression would
// not shrink is stored as it is.
func TestRawResponsePacked(t *testing.T) {
	t.Parallel()
	for _, enc := range []bool{false, true} {
		t.Run(fmt.Sprintf("encrypted=%v", enc), func(t *testing.T) {
			t.Parallel()
			eachDialect(t, func(t *testing.T, db *ledger.DB) {
				if enc {
					db.UseKeyring(keyring(t, mk("k1", 1)))
					if err := db.CheckKeys(context.Background(), t0); err != nil {
						t.Fatal(err)
					}
				}
				for i, raw := range []string{chatRaw, `{}`, "stet:z1:AAAA", "stet:v1:not-sealed", strings.Repeat("x", 5000)} {
					res := accept(t, db, fmt.Sprintf("r-%d", i), 1, "some text", fmt.Sprintf("d-%d", i))
					saveRaw(t, db, res.JobID, []byte(raw))
					got, stored := rawOf(t, db, res.ReportID, res.JobID)
					if got != raw {
						t.Errorf("raw %d read back = %q, want %q", i, got, raw)
					}
					if raw == chatRaw && len(stored) > len(raw)/2 {
						t.Errorf("stored raw is %d bytes for %d, want under half", len(stored), len(raw))
					}
					if enc && !strings.HasPrefix(stored, "stet:v1:") {
						t.Errorf("raw %d stored as %.20q, want sealed", i, stored)
					}
				}
			})
		})
	}
}

func saveRaw(t *testing.T, db *ledger.DB, jobID string, raw []byte) {
	t.Helper()
	token, n, err := claim(t, db, jobID, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	saveRawAt(t, db, jobID, token, n, raw)
}

func saveRawAt(t *testing.T, db *ledger.DB, jobID string, token int64, n int, raw []byte) {
	t.Helper()
	err := db.InTx(context.Background(), func(tx *sql.Tx) error {
		return db.SaveArtifact(context.Background(), tx, ledger.SaveArtifactParams{JobID: jobID, Token: token, AttemptN: n,
			Raw: raw, Output: []byte(`{"category":"none"}`), SchemaVersion: "moderation@1", ProcessorID: "p1", Model: "m1", Now: t0})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Rekey seals a packed plaintext raw response, and it still reads back.
func TestRekeySealsPackedRaw(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		ctx := context.Background()
		res := accept(t, db, "r-rk", 1, "some text", "d-rk")
		saveRaw(t, db, res.JobID, []byte(chatRaw))
		if _, stored := rawOf(t, db, res.ReportID, res.JobID); !strings.HasPrefix(stored, "stet:z1:") {
			t.Fatalf("stored raw = %.20q, want packed plaintext", stored)
		}
		db.UseKeyring(keyring(t, mk("k1", 1)))
		if err := db.CheckKeys(ctx, t0); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Rekey(ctx, ledger.RekeyParams{Actor: "test", Now: func() time.Time { return t0 }}); err != nil {
			t.Fatal(err)
		}
		got, stored := rawOf(t, db, res.ReportID, res.JobID)
		if !strings.HasPrefix(stored, "stet:v1:") || got != chatRaw {
			t.Fatalf("after rekey: stored %.20q, read %q; want sealed and the response", stored, got)
		}
	})
}

// Every lookup of revisions by report uses the (report_id, revision) index
// once revisions_report is gone.
func TestRevisionsByReportUseIndex(t *testing.T) {
	t.Parallel()
	db := open(t, ledger.SQLite)
	for _, q := range []string{
		`SELECT revision FROM revisions WHERE report_id = 1 AND content_sha256 = X'00' ORDER BY revision LIMIT 1`,
		`SELECT COALESCE(MAX(revision), 0) + 1 FROM revisions WHERE report_id = 1`,
		`SELECT DISTINCT policy_version FROM revisions WHERE report_id = 1`,
		`SELECT COUNT(*) FROM revisions WHERE report_id = 1 AND (text IS NOT NULL OR metadata IS NOT NULL OR content_sha256 IS NOT NULL)`,
	} {
		rows, err := db.Writer().Query(`EXPLAIN QUERY PLAN ` + q)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		// The table's key is its rowid: the (report_id, revision) key's is
		// its first index.
		if p := strings.Join(plan, "; "); !strings.Contains(p, "sqlite_autoindex_revisions_1") {
			t.Errorf("plan of %s = %s, want the (report_id, revision) index", q, p)
		}
	}
}

// TestLookupsSearchIndexes reads the plan of every statement that finds a
// report by external ID or a report's rows for a deletion. On
// SQLite no step may scan a table or a whole index; on PostgreSQL (with
// sequential scans priced out, as on a large ledger) no step may be a
// sequential scan or an index scan without an index condition (a whole
// index read in place of the table). PostgreSQL's planner, on these empty
// tables, may still pick an index by a column that is not its first (a
// whole-index read this check does not see), so SQLite's plans are the
// strict half. Migration 0015 dropped the indexes by
// external ID and of jobs by report; these statements go through the
// identity hash and the report's revisions instead.
func TestLookupsSearchIndexes(t *testing.T) {
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		ctx := context.Background()
		conn, err := db.Writer().Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		pg := db.Dialect() == ledger.Postgres
		if pg {
			if _, err := conn.ExecContext(ctx, `SET enable_seqscan = off`); err != nil {
				t.Fatal(err)
			}
		}
		if len(ledger.Lookups) < 18 {
			t.Fatalf("%d statements, want every one of 18", len(ledger.Lookups))
		}
		for name, l := range ledger.Lookups {
			plan := explainPlan(t, ctx, conn, pg, name, l.Query, l.Args, pgPlanNode.scans)
			for _, step := range plan {
				// SCAN CONSTANT ROW is a SELECT of subqueries, not a table.
				if (strings.HasPrefix(step, "SCAN ") && step != "SCAN CONSTANT ROW") || strings.HasPrefix(step, "whole ") {
					t.Errorf("%s scans: %s", name, strings.Join(plan, "; "))
					break
				}
			}
		}
	})
}

// A listing of the newest rows, or the sweep's oldest pending ones, reads
// its index in order and stops at the LIMIT: no sort of every row (a
// ledger keeps every deletion it was asked for).
func TestOrderedReadsNeedNoSort(t *testing.T) {
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		ctx := context.Background()
		conn, err := db.Writer().Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		pg := db.Dialect() == ledger.Postgres
		if pg {
			// On the empty test tables PostgreSQL would sort a bitmap
			// scan's rows; with sorts priced out, as on a large ledger, a
			// Sort left in the plan means no index gives the order.
			if _, err := conn.ExecContext(ctx, `SET enable_seqscan = off; SET enable_sort = off`); err != nil {
				t.Fatal(err)
			}
		}
		if len(ledger.OrderedReads) < 3 {
			t.Fatalf("%d statements, want every one of 3", len(ledger.OrderedReads))
		}
		for name, r := range ledger.OrderedReads {
			var args []any
			for n := 1; strings.Contains(r.Query, fmt.Sprintf("$%d", n)); n++ {
				args = append(args, "x")
			}
			args[len(args)-1] = 100 // the LIMIT
			if strings.Contains(r.Query, "updated_at < $1") {
				args[0] = int64(0) // the sweep's cut
			}
			plan := explainPlan(t, ctx, conn, pg, name, r.Query, args, pgPlanNode.steps)
			joined := strings.Join(plan, "; ")
			if strings.Contains(joined, "TEMP B-TREE") || strings.Contains(joined, "Sort") {
				t.Errorf("%s sorts: %s", name, joined)
			}
			if !strings.Contains(joined, "INDEX "+r.Index) && !strings.Contains(joined, "using "+r.Index) {
				t.Errorf("%s does not read %s: %s", name, r.Index, joined)
			}
		}
	})
}

// explainPlan returns q's plan: SQLite's EXPLAIN QUERY PLAN lines, or
// what pgSteps makes of PostgreSQL's EXPLAIN (FORMAT JSON).
func explainPlan(t *testing.T, ctx context.Context, conn *sql.Conn, pg bool, name, q string, args []any,
	pgSteps func(pgPlanNode, []string) []string) []string {
	t.Helper()
	var plan []string
	if pg {
		var doc string
		if err := conn.QueryRowContext(ctx, "EXPLAIN (FORMAT JSON) "+q, args...).Scan(&doc); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var top []struct{ Plan pgPlanNode }
		if err := json.Unmarshal([]byte(doc), &top); err != nil || len(top) != 1 {
			t.Fatalf("%s: plan %s: %v", name, doc, err)
		}
		return pgSteps(top[0].Plan, nil)
	}
	rows, err := conn.QueryContext(ctx, "EXPLAIN QUERY PLAN "+q, args...)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, parent, unused int
		var line string
		if err := rows.Scan(&id, &parent, &unused, &line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, strings.TrimSpace(line))
	}
	return plan
}

// steps lists every node of the plan, each its type and the index it
// reads, if any.
func (n pgPlanNode) steps(out []string) []string {
	s := n.NodeType
	if n.Index != "" {
		s += " using " + n.Index
	}
	out = append(out, s)
	for _, c := range n.Plans {
		out = c.steps(out)
	}
	return out
}

// pgPlanNode is a node of PostgreSQL's EXPLAIN (FORMAT JSON).
type pgPlanNode struct {
	NodeType  string       `json:"Node Type"`
	Relation  string       `json:"Relation Name"`
	Index     string       `json:"Index Name"`
	IndexCond string       `json:"Index Cond"`
	Plans     []pgPlanNode `json:"Plans"`
}

// scans lists the plan's scans, each "search" (by an index condition) or
// "whole" (a sequential scan, or an index read without a condition).
func (n pgPlanNode) scans(out []string) []string {
	switch n.NodeType {
	case "Seq Scan":
		out = append(out, "whole "+n.Relation)
	case "Index Scan", "Index Only Scan", "Bitmap Index Scan":
		kind := "search "
		if n.IndexCond == "" {
			kind = "whole "
		}
		out = append(out, kind+n.Relation+" using "+n.Index)
	}
	for _, c := range n.Plans {
		out = c.scans(out)
	}
	return out
}
