package ledger

import "context"

// MigrateTo applies the migrations up to version upTo: a test builds a
// ledger as an older stet left it, then migrates it.
func (db *DB) MigrateTo(ctx context.Context, upTo int) ([]string, error) {
	return db.migrate(ctx, upTo)
}

// StatementsByReport are the statements that find a report by external ID
// or a report's rows for a deletion, by name; each searches indexes.
var StatementsByReport = map[string]string{
	"report by external ID": qReportByExternalID,
	"report to delete":      qReportToDelete,
	"cancel report jobs":    qCancelReportJobs,
	"provider copies":       qProviderCopies,
	"sync processors":       qSyncProcessors,
	"records of report":     qRecordsOfReport,
	"deleted events":        qDeletedEvents,
}

func init() {
	for c, q := range deleteCopy {
		StatementsByReport["delete "+c] = q
	}
	for c, q := range verifyCopy {
		StatementsByReport["verify "+c] = q
	}
}
