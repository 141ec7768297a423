package ledger

import (
	"context"
	"strings"
)

// MigrateTo applies the migrations up to version upTo: a test builds a
// ledger as an older stet left it, then migrates it.
func (db *DB) MigrateTo(ctx context.Context, upTo int) ([]string, error) {
	return db.migrate(ctx, upTo)
}

// Lookup is a statement and arguments of the types it binds.
type Lookup struct {
	Query string
	Args  []any
}

// Lookups are, by name, the statements that find a report by external ID
// or a report's rows for a deletion; each must search indexes
// (TestLookupsSearchIndexes).
var Lookups = map[string]Lookup{
	"report by external ID": {qReportByExternalID, []any{"t", "s", make([]byte, 32), make([]byte, 32)}},
	"report to delete":      {qReportToDelete, []any{"t", "s", make([]byte, 32), make([]byte, 32)}},
	"cancel report jobs":    {qCancelReportJobs, []any{int64(1), int64(0)}},
	"provider copies":       {qProviderCopies, []any{int64(1)}},
	"sync processors":       {qSyncProcessors, []any{int64(1)}},
	"records of report":     {qRecordsOfReport, []any{int64(1)}},
	"job IDs of report":     {qJobIDsOfReport, []any{int64(1)}},
	"deleted events":        {qDeletedEvents, []any{"job_x", "d", "record.deleted"}},
}

// OrderedReads are, by name, statements that read a growing table's
// newest or oldest rows with a LIMIT, and the index each must read in
// order, with no sort (TestOrderedReadsNeedNoSort).
var OrderedReads = map[string]struct{ Query, Index string }{
	"tenant's deletions": {qTenantDeletions, "deletions_tenant"},
	"every deletion":     {qAllDeletions, "deletions_requested"},
	"open deletions":     {qOpenDeletions, "deletions_pending"},
}

func init() {
	for c, q := range deleteCopy {
		Lookups["delete "+c] = Lookup{q, []any{int64(1), int64(0)}[:strings.Count(q, "$2")+1]}
	}
	for c, q := range verifyCopy {
		Lookups["verify "+c] = Lookup{q, []any{int64(1)}}
	}
}

// TombstoneOf is the tombstone the ledger stores for an identity (its
// plain hash): blind with encryption on (blindindex.go).
func (db *DB) TombstoneOf(tenant, source, identity string) string {
	return db.tombstoneOf(tenant, source, identity)
}

// The intake paths Accept chooses among, for tests that prove each gives
// one delivery at a time's outcomes.

func (db *DB) AcceptOne(ctx context.Context, tx Querier, p AcceptParams) (AcceptResult, bool, error) {
	return db.acceptOne(ctx, tx, p)
}

func (db *DB) AcceptSetTx(ctx context.Context, tx Querier, ps []AcceptParams, enq *Enqueue) ([]AcceptResult, []bool, error) {
	return db.acceptSetTx(ctx, tx, ps, enq)
}

func (db *DB) AcceptCommitted(ctx context.Context, ps []AcceptParams, enq *Enqueue) ([]AcceptResult, error) {
	return db.acceptCommitted(ctx, ps, enq)
}

func (db *DB) Pipelines(ps []AcceptParams) bool { return db.pipelines(ps, &Enqueue{}) }
