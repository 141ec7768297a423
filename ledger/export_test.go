package ledger

import "context"

// MigrateTo applies the migrations up to version upTo: a test builds a
// ledger as an older stet left it, then migrates it.
func (db *DB) MigrateTo(ctx context.Context, upTo int) ([]string, error) {
	return db.migrate(ctx, upTo)
}
