package ledger

import "context"

// MigrateTo applies the migrations up to version upTo: a test builds a
// ledger as an older stet left it, then migrates it.
func (db *DB) MigrateTo(ctx context.Context, upTo int) ([]string, error) {
	return db.migrate(ctx, upTo)
}

// Lookups are, by name, the statements that find a report by external ID
// or a report's rows for a deletion; each must search indexes
// (TestLookupsSearchIndexes).
var Lookups = map[string]string{
	"report by external ID": qReportByExternalID,
	"report to delete":      qReportToDelete,
	"cancel report jobs":    qCancelReportJobs,
	"provider copies":       qProviderCopies,
	"sync processors":       qSyncProcessors,
	"records of report":     qRecordsOfReport,
	"deleted events":        qDeletedEvents,
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
		Lookups["delete "+c] = q
	}
	for c, q := range verifyCopy {
		Lookups["verify "+c] = q
	}
}
