package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// ErrSavepoint means a savepoint statement itself failed (not the work
// inside it): the transaction can no longer be trusted and must be rolled
// back as a whole.
var ErrSavepoint = errors.New("savepoint failed")

// Savepoint runs fn inside a savepoint named name in tx. If fn returns an
// error, the savepoint is rolled back (the rest of tx stands) and released,
// and Savepoint returns fn's error unchanged; the caller may go on with tx.
// If a savepoint statement fails, it returns an error wrapping ErrSavepoint.
// SQLite and PostgreSQL spell savepoints alike. name must be a plain
// identifier (letters, digits, underscores); it is never user input.
func Savepoint(ctx context.Context, tx *sql.Tx, name string, fn func() error) error {
	if !plainIdentifier(name) {
		return fmt.Errorf("%w: %q is not a plain identifier", ErrSavepoint, name)
	}
	if _, err := tx.ExecContext(ctx, "SAVEPOINT "+name); err != nil {
		return fmt.Errorf("%w: savepoint %s: %w", ErrSavepoint, name, err)
	}
	if ferr := fn(); ferr != nil {
		if _, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT "+name); err != nil {
			return fmt.Errorf("%w: rollback to savepoint %s: %w", ErrSavepoint, name, err)
		}
		if _, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT "+name); err != nil {
			return fmt.Errorf("%w: release savepoint %s: %w", ErrSavepoint, name, err)
		}
		return ferr
	}
	if _, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT "+name); err != nil {
		return fmt.Errorf("%w: release savepoint %s: %w", ErrSavepoint, name, err)
	}
	return nil
}

func plainIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
