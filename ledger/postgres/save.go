package postgres

// The save fast path: one call of a stored function (its body is
// migrations/functions/<name>.sql) saves a stage result — the fence on the
// attempt token, the artifact, the attempt's outcome and, when asked, the
// review record. SaveResultCommit aborts its transaction (SQLSTATE ST002)
// unless every part was written, so a COMMIT sent behind it commits the
// whole result or nothing. The ledger (ledger/saveresult_pg.go) binds the
// arguments.
const (
	SaveResult = `SELECT stet_save_result($1, $2, $3, $4, $5, $6, $7, $8, $9, $10,
		$11, $12, $13, $14, $15, $16, $17, $18, $19)`
	SaveResultCommit = `SELECT stet_save_result_commit($1, $2, $3, $4, $5, $6, $7, $8, $9, $10,
		$11, $12, $13, $14, $15, $16, $17, $18, $19)`
)
