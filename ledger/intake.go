package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"

	"github.com/stetlabs/stet"
)

// Enqueue asks Accept to enqueue River's extract job for every sync job it
// creates, in the transaction that creates the job: River job args
// {"job_id": the ledger job}, with the kind, queue, priority and attempts
// given here. The database must hold River's tables.
type Enqueue struct {
	Kind, Queue           string
	Priority, MaxAttempts int
	Metadata              [][]byte // each delivery's River job metadata (JSON), as ps; nil for none
	// Insert inserts River's jobs, inside tx, wherever the driver does not
	// write them in its own statements (item by item: always on SQLite):
	// River's InsertManyFastTx, so that River's own code writes its table.
	Insert func(ctx context.Context, tx *sql.Tx, jobs []NewExtract) error
}

// NewExtract is a new sync job whose River extract job Enqueue.Insert
// inserts, with its delivery's metadata.
type NewExtract struct {
	JobID    string
	Metadata []byte
}

// Accept records a group of deliveries, each with its delivery receipt,
// report, revision and job, and with enq the River extract job of each new
// sync job, and commits them: what it returns is durable. res[i] and
// errs[i] answer ps[i]; a delivery that fails on its own (errs[i] set)
// leaves the others recorded. An error answers the whole group: nothing of
// it was recorded, except after an error wrapping ErrCommit, when whether
// the COMMIT took is unknown (a redelivery then finds what it did).
//
// Unique constraints decide every race, in whatever order the group comes:
// Accept takes report rows in the order of their identity, so that groups
// racing on the same reports wait for each other instead of deadlocking.
// How many round trips a group costs is the driver's business and never
// changes an outcome: on PostgreSQL without encryption, a group whose
// deliveries share no identity or webhook-id is two round trips
// (acceptCommitted); otherwise set-based statements in a transaction
// (acceptSetTx); on SQLite, and after an item failed, item by item, each
// under a savepoint once one has failed. A transaction that failed as a
// whole for a reason worth another try (a deadlock, a busy file) runs
// again, up to four times in all.
func (db *DB) Accept(ctx context.Context, ps []AcceptParams, enq *Enqueue) ([]AcceptResult, []error, error) {
	order := lockOrder(ps)
	sorted := make([]AcceptParams, len(ps))
	for k, i := range order {
		sorted[k] = ps[i]
	}
	var senq *Enqueue
	if enq != nil {
		e := *enq
		e.Metadata = make([][]byte, len(ps))
		for k, i := range order {
			if i < len(enq.Metadata) {
				e.Metadata[k] = enq.Metadata[i]
			}
		}
		senq = &e
	}
	res, errs, err := db.acceptSorted(ctx, sorted, senq)
	if err != nil {
		return nil, nil, err
	}
	outRes, outErrs := make([]AcceptResult, len(ps)), make([]error, len(ps))
	for k, i := range order {
		outRes[i], outErrs[i] = res[k], errs[k]
	}
	return outRes, outErrs, nil
}

// lockOrder returns the indexes of ps sorted by report identity (tenant,
// source, identity hash), stable for equal ones.
func lockOrder(ps []AcceptParams) []int {
	keys := make([]string, len(ps))
	order := make([]int, len(ps))
	for i := range ps {
		p := &ps[i]
		keys[i] = p.TenantID + "\x00" + p.SourceID + "\x00" + p.identity()
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return keys[order[a]] < keys[order[b]] })
	return order
}

// errItemFailed rolls a group's transaction back to run it again item by
// item, each under a savepoint.
var errItemFailed = errors.New("an item of the group failed")

func (db *DB) acceptSorted(ctx context.Context, ps []AcceptParams, enq *Enqueue) ([]AcceptResult, []error, error) {
	errs := make([]error, len(ps))
	savepoints := false
	switch res, err := db.acceptCommitted(ctx, ps, enq); {
	case err == nil:
		return res, errs, nil
	case errors.Is(err, ErrCommit):
		return nil, nil, err
	case !errors.Is(err, errNotPipelined):
		savepoints = true // rolled back: item by item
	}
	var res []AcceptResult
	var err error
	for try := 0; try < 4; try++ {
		res, err = db.acceptTx(ctx, ps, enq, errs, savepoints)
		switch {
		case errors.Is(err, errItemFailed):
			savepoints = true
			continue
		case err != nil && db.IsRetryable(err):
			continue
		}
		break
	}
	if err != nil {
		return nil, nil, err
	}
	return res, errs, nil
}

// acceptTx runs the group in one transaction: set-based where the database
// has the statements, otherwise item by item, under a savepoint each when
// savepoints is set. Without savepoints, any item's failure rolls the
// group back with errItemFailed.
func (db *DB) acceptTx(ctx context.Context, ps []AcceptParams, enq *Enqueue, errs []error, savepoints bool) ([]AcceptResult, error) {
	res := make([]AcceptResult, len(ps))
	clear(errs)
	err := db.InTx(ctx, func(tx *sql.Tx) error {
		if !savepoints && db.dialect.name == Postgres && !hasAudio(ps) {
			r, _, err := db.acceptSetTx(ctx, tx, ps, enq)
			if err != nil {
				return errItemFailed
			}
			copy(res, r)
			return nil
		}
		var jobs []NewExtract
		for i := range ps {
			sp := fmt.Sprintf("d%d", i)
			for try := 0; ; try++ {
				var newJob bool
				accept := func() error {
					var err error
					res[i], newJob, err = db.acceptOne(ctx, tx, ps[i])
					return err
				}
				var err error
				if savepoints {
					err = Savepoint(ctx, tx, sp, accept)
				} else {
					err = accept()
				}
				if err != nil {
					if !savepoints {
						return errItemFailed
					}
					if errors.Is(err, ErrSavepoint) {
						return err
					}
					if errors.Is(err, ErrRetryItem) && try < 3 {
						continue
					}
					res[i], errs[i] = AcceptResult{}, err
					break
				}
				if newJob && ps[i].Mode != stet.ModeBatch && enq != nil {
					jobs = append(jobs, NewExtract{JobID: res[i].JobID, Metadata: enq.Metadata[i]})
				}
				break
			}
		}
		if len(jobs) == 0 {
			return nil
		}
		if enq.Insert == nil {
			return errors.New("enqueue extract: no River insert given")
		}
		if err := enq.Insert(ctx, tx, jobs); err != nil {
			return fmt.Errorf("enqueue extract: %w", err)
		}
		return nil
	})
	return res, err
}
