package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stetlabs/stet"
)

// Reads for the review UI (docs/design.md §12). Like every ledger read they are
// scoped to a tenant, and they never put text in an error.

// QueueFilter selects the review queue, newest revision first.
type QueueFilter struct {
	Tenant       string
	State        stet.RecordState // empty: any
	Source       string
	Kind         stet.RecordKind
	Category     string // the classification's "category" field
	FailureClass stet.FailureClass
	Before       string // cursor: the last record ID of the previous page
	Limit        int
	// Superseded keeps, in the pending queue, the records a newer
	// revision superseded (left out otherwise).
	Superseded bool
}

// categoryExpr is the SQL for a record's classification.category (the
// record's table named rr).
func (db *DB) categoryExpr() string {
	if db.dialect.name == Postgres {
		return `(rr.classification::jsonb ->> 'category')`
	}
	return `json_extract(rr.classification, '$.category')`
}

// ListQueue lists a tenant's review records newest first (by key, which
// grows with time), a page at a time. It returns the cursor of the next page,
// or "" after the last.
func (db *DB) ListQueue(ctx context.Context, f QueueFilter) ([]*stet.ReviewRecord, string, error) {
	if f.Limit <= 0 || f.Limit > 200 {
		f.Limit = 50
	}
	args := []any{f.Tenant}
	where := []string{"rr.tenant_id = $1"}
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if f.State != "" {
		add("rr.state = $%d", string(f.State))
	}
	if f.Source != "" {
		add("rr.source_id = $%d", f.Source)
	}
	if f.Kind != "" {
		add("rr.kind = $%d", string(f.Kind))
	}
	// Sealed classifications cannot be read in SQL: with encryption on the
	// category is matched after opening, page by page (sealedQueue).
	if f.Category != "" && db.keys == nil {
		add(db.categoryExpr()+" = $%d", f.Category)
	}
	if f.FailureClass != "" {
		add("rr.failure_class = $%d", string(f.FailureClass))
	}
	if f.State == stet.RecordPending && !f.Superseded {
		where = append(where, notSuperseded)
	}
	var out []*stet.ReviewRecord
	var err error
	if f.Category != "" && db.keys != nil {
		out, err = db.sealedQueue(ctx, f, where, args)
	} else {
		if f.Before != "" {
			add("rr.id < (SELECT id FROM review_records WHERE public_id = $%d)", pub(f.Before))
		}
		args = append(args, f.Limit+1)
		out, err = db.queryRecords(ctx, `SELECT `+recordColumns+` FROM `+recordFrom+` WHERE `+strings.Join(where, " AND ")+
			fmt.Sprintf(` ORDER BY rr.id DESC LIMIT $%d`, len(args)), args...)
	}
	if err != nil {
		return nil, "", fmt.Errorf("list review queue: %w", err)
	}
	next := ""
	if len(out) > f.Limit {
		out = out[:f.Limit]
		next = out[len(out)-1].ID
	}
	return out, next, nil
}

// sealedQueue lists the queue filtered by category when classifications
// are sealed: it reads pages of the other filters' matches, opens them, and
// keeps those of the category, until it has one more than a page.
func (db *DB) sealedQueue(ctx context.Context, f QueueFilter, where []string, args []any) ([]*stet.ReviewRecord, error) {
	const chunk = 200
	var out []*stet.ReviewRecord
	before := f.Before
	for {
		a := append([]any{}, args...)
		w := append([]string{}, where...)
		if before != "" {
			a = append(a, pub(before))
			w = append(w, "rr.id < "+recordKeySQL(fmt.Sprintf("$%d", len(a))))
		}
		a = append(a, chunk)
		page, err := db.queryRecords(ctx, `SELECT `+recordColumns+` FROM `+recordFrom+` WHERE `+strings.Join(w, " AND ")+
			fmt.Sprintf(` ORDER BY rr.id DESC LIMIT $%d`, len(a)), a...)
		if err != nil {
			return nil, err
		}
		for _, r := range page {
			if recordCategory(r) == f.Category {
				out = append(out, r)
				if len(out) > f.Limit {
					return out, nil
				}
			}
		}
		if len(page) < chunk {
			return out, nil
		}
		before = page[len(page)-1].ID
	}
}

// recordCategory is a record's classification.category, "" if none.
func recordCategory(r *stet.ReviewRecord) string {
	var c struct {
		Category any `json:"category"`
	}
	if len(r.Classification) == 0 || json.Unmarshal(r.Classification, &c) != nil {
		return ""
	}
	if s, ok := c.Category.(string); ok {
		return s
	}
	if c.Category == nil {
		return ""
	}
	b, _ := json.Marshal(c.Category)
	return string(b)
}

// QueueCounts are a tenant's review records counted by each filter's values.
type QueueCounts struct {
	Total        int
	State        map[string]int
	Source       map[string]int
	Kind         map[string]int
	Category     map[string]int
	FailureClass map[string]int
}

// CountQueue counts a tenant's review records by state, source, kind,
// category and failure class.
func (db *DB) CountQueue(ctx context.Context, tenant string) (*QueueCounts, error) {
	c := &QueueCounts{}
	groups := []struct {
		expr string
		into *map[string]int
	}{
		{"rr.state", &c.State}, {"rr.source_id", &c.Source}, {"rr.kind", &c.Kind},
		{db.categoryExpr(), &c.Category}, {"rr.failure_class", &c.FailureClass},
	}
	if db.keys != nil {
		// Sealed classifications are counted after opening them.
		groups = append(groups[:3], groups[4])
		m, err := db.sealedCategories(ctx, tenant)
		if err != nil {
			return nil, err
		}
		c.Category = m
	}
	for _, d := range groups {
		m := map[string]int{}
		rows, err := db.r.QueryContext(ctx, `SELECT `+d.expr+`, COUNT(*) FROM review_records rr WHERE rr.tenant_id = $1 GROUP BY `+d.expr, tenant)
		if err != nil {
			return nil, fmt.Errorf("count review queue: %w", err)
		}
		for rows.Next() {
			var k sql.NullString
			var n int
			if err := rows.Scan(&k, &n); err != nil {
				rows.Close()
				return nil, fmt.Errorf("count review queue: %w", err)
			}
			if k.Valid {
				m[k.String] = n
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		*d.into = m
	}
	for _, n := range c.State {
		c.Total += n
	}
	return c, nil
}

// sealedCategories counts a tenant's records by category, opening each
// classification: the cost of keeping the category sealed.
func (db *DB) sealedCategories(ctx context.Context, tenant string) (map[string]int, error) {
	m := map[string]int{}
	after := ""
	for {
		page, err := db.queryRecords(ctx, `SELECT `+recordColumns+` FROM `+recordFrom+`
			WHERE rr.tenant_id = $1 AND rr.id > COALESCE(`+recordKeySQL("$2")+`, 0) AND rr.classification IS NOT NULL
			ORDER BY rr.id LIMIT 500`, tenant, blob(pub(after)))
		if err != nil {
			return nil, fmt.Errorf("count review queue: %w", err)
		}
		for _, r := range page {
			if k := recordCategory(r); k != "" {
				m[k]++
			}
		}
		if len(page) < 500 {
			return m, nil
		}
		after = page[len(page)-1].ID
	}
}

// RevisionText is the document text of a job's revision, or when it was
// purged.
type RevisionText struct {
	Text     stet.Text
	PurgedAt time.Time // zero while the text is held
}

// JobText reads the text of the revision a job of tenant extracts.
func (db *DB) JobText(ctx context.Context, tenant, jobID string) (*RevisionText, error) {
	var text sql.NullString
	var purged sql.NullInt64
	var reportID, legacy, content string
	var sealed int
	err := db.r.QueryRowContext(ctx, `SELECT rp.public_id, COALESCE(v.legacy_id, ''), v.content_sha256, v.text, v.text_purged_at, v.sealed
		FROM jobs j JOIN revisions v ON v.id = j.revision_id JOIN reports rp ON rp.id = j.report_id
		WHERE j.public_id = $1 AND j.tenant_id = $2`, pub(jobID), tenant).Scan(reportPub(&reportID), &legacy, shaScan{&content}, &text, &purged, &sealed)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("job")
	}
	if err != nil {
		return nil, fmt.Errorf("read revision text: %w", err)
	}
	text, err = db.opener(db.r).open(ctx, reportID, colRevisionText, RevisionBinding(legacy, reportID, content), text, sealed)
	switch {
	case errors.Is(err, ErrKeyDestroyed):
		text = sql.NullString{} // a deleted report's: gone
	case err != nil:
		return nil, fmt.Errorf("read revision text: %w", err)
	}
	return &RevisionText{Text: stet.NewText(text.String), PurgedAt: fromMicros(purged)}, nil
}

// HistoryEntry is one revision of a report with its job and review record.
type HistoryEntry struct {
	Revision      int64
	JobID         string
	JobState      stet.JobState
	RecordID      string // "" until the job has a record
	RecordState   stet.RecordState
	Decision      stet.Decision
	Authoritative bool
	ReceivedAt    time.Time
	TextPurgedAt  time.Time // zero while the text is held
}

// ReportHistory lists a report's revisions, newest first.
func (db *DB) ReportHistory(ctx context.Context, tenant, reportID string) ([]HistoryEntry, error) {
	rows, err := db.r.QueryContext(ctx, `SELECT v.revision, j.public_id, j.state, rr.public_id, rr.state, rr.decision, COALESCE(rr.authoritative, FALSE),
			v.received_at, v.text_purged_at
		FROM revisions v JOIN jobs j ON j.revision_id = v.id LEFT JOIN review_records rr ON rr.job_id = j.id
		WHERE v.report_id = `+reportKeySQL("$1")+` AND j.tenant_id = $2 AND j.parent_job_id IS NULL ORDER BY v.revision DESC, j.created_at DESC`, pub(reportID), tenant)
	if err != nil {
		return nil, fmt.Errorf("read report history: %w", err)
	}
	defer rows.Close()
	var out []HistoryEntry
	for rows.Next() {
		var h HistoryEntry
		var state string
		var recState, decision sql.NullString
		var received int64
		var purged sql.NullInt64
		if err := rows.Scan(&h.Revision, jobPub(&h.JobID), &state, recordPub(&h.RecordID), &recState, &decision, &h.Authoritative, &received, &purged); err != nil {
			return nil, fmt.Errorf("read report history: %w", err)
		}
		h.JobState, h.RecordState, h.Decision = stet.JobState(state), stet.RecordState(recState.String), stet.Decision(decision.String)
		h.ReceivedAt, h.TextPurgedAt = time.UnixMicro(received).UTC(), fromMicros(purged)
		out = append(out, h)
	}
	return out, rows.Err()
}

// TenantBatches lists the batches that hold a job of tenant, newest first:
// a tenant's operator sees no other tenant's batches. A batch holds any
// tenant's jobs, so ItemCount and AppliedCount count tenant's items only.
func (db *DB) TenantBatches(ctx context.Context, tenant string, limit int) ([]*Batch, error) {
	own := `(SELECT COUNT(*) FROM batch_items i JOIN jobs j ON j.id = i.job_id WHERE i.batch_id = b.id AND j.tenant_id = $1`
	cols := strings.Replace(batchColumns, "item_count, applied_count", own+"), "+own+" AND i.applied_at IS NOT NULL)", 1)
	rows, err := db.r.QueryContext(ctx, `SELECT `+cols+` FROM batches b WHERE EXISTS (
			SELECT 1 FROM batch_items i JOIN jobs j ON j.id = i.job_id WHERE i.batch_id = b.id AND j.tenant_id = $1)
		ORDER BY created_at DESC, id DESC LIMIT $2`, tenant, limit)
	if err != nil {
		return nil, fmt.Errorf("list batches: %w", err)
	}
	defer rows.Close()
	var out []*Batch
	for rows.Next() {
		b, err := scanBatch(rows)
		if err != nil {
			return nil, fmt.Errorf("list batches: %w", err)
		}
		out = append(out, b)
	}
	return out, rows.Err()
}
