package stet

import (
	"context"
	"time"
)

// DeletionState is the state of a deletion and of each of its tasks. The
// list is closed.
type DeletionState string

// Deletion states. A deletion is done only when every task is done, and
// unresolved when any task is unresolved: nothing half-done reads as done.
const (
	DeletionPending    DeletionState = "pending"    // work remains that stet will do
	DeletionDone       DeletionState = "done"       // deleted and verified
	DeletionUnresolved DeletionState = "unresolved" // stet cannot delete or verify this copy; see the reason and expires_at
)

// DeletionStates lists every deletion state.
var DeletionStates = []DeletionState{DeletionPending, DeletionDone, DeletionUnresolved}

// Deletion is one erasure request for a report and the copies it must reach.
type Deletion struct {
	ID          string
	TenantID    string
	SourceID    string
	ReportID    string
	State       DeletionState
	RequestedBy string
	RequestedAt time.Time
	DoneAt      time.Time // zero until every task is done
	Tasks       []DeletionTask
}

// DeletionTask is one copy of a report's data and what became of it. Copy
// names the copy: revision_text, artifacts, review_records, attempts,
// deliveries, encryption_key, provider_file:<processor>/<file_id>,
// provider_batch:<processor>/<batch_id>, provider_retention:<processor>, and
// (when destinations exist) outbound:<destination>.
type DeletionTask struct {
	Copy      string
	State     DeletionState
	DueAt     time.Time // when it should be done; invariant 6 fires after
	DoneAt    time.Time
	ExpiresAt time.Time // for copies a provider holds: when its declared retention ends
	Reason    string    // why a task is unresolved (or done without work); never text
	// ConfirmedBy and Evidence are an operator's, for a copy stet could
	// not delete itself and an operator confirmed gone (stet deletions
	// confirm).
	ConfirmedBy string
	Evidence    string
}

// CopyDeleter deletes the copies a processor's provider holds: batch input,
// output and error files, and the batches themselves. Adapters whose
// provider has a delete API implement it; a processor without it leaves
// its provider tasks unresolved, with the reason.
//
// Both methods are idempotent: deleting a copy that is already gone returns
// nil. They may be called concurrently. An error carries a failure class
// (ClassOf): transient and rate_limited are retried; any other class
// (unsupported: the provider cannot delete it; auth, quota) leaves the task
// unresolved with the class as its reason. They never return document text.
type CopyDeleter interface {
	// DeleteFile deletes one provider-held file by its provider ID.
	DeleteFile(ctx context.Context, fileID string) error
	// DeleteBatch deletes one provider batch (its record and whatever the
	// provider keeps with it) by its provider ID.
	DeleteBatch(ctx context.Context, batchID string) error
}

// CodeNoDeleteAPI is the Code of the unsupported error a CopyDeleter
// returns, without a network call, for a copy its provider's API has no
// way to delete (OpenAI's batch records, any copy at Infrai): the provider
// keeps it under its own retention, so the task is unresolved with that
// reason, never done.
const CodeNoDeleteAPI = "no_delete_api"

// CodeUndeclaredSubprocessor is the Code of the boundary error an adapter
// returns when its provider reports that a vendor the processor does not
// declare among its subprocessors served the call (Infrai's
// metadata.vendor): the output is discarded and the processor paused.
const CodeUndeclaredSubprocessor = "undeclared_subprocessor"
