package stet

import (
	"context"
	"slices"
	"time"
)

// BatchProcessor is a processor with a provider batch API: many requests
// submitted as one deferred job, polled, and answered together, usually at
// half the price. stet submits each batch once, polls it on a durable
// schedule and applies each item's result once.
//
// Guarantees an implementation must give, besides those of Processor:
//   - SubmitBatch makes exactly one creating call (file uploads before it
//     are not creating calls) and never retries on its own. It calls
//     BatchSubmit.BeforeCreate immediately before that call and aborts,
//     without creating anything, if it returns an error.
//   - FindBatch, BatchStatus and BatchResults never create a batch and
//     never send document text.
//   - Every failure is a *ProcessorError with a FailureClass; errors carry
//     no document text, prompts, model output or provider IDs in their
//     Error string.
type BatchProcessor interface {
	Processor
	BatchInfo() BatchInfo
	// SubmitBatch sends the items as one provider batch labelled with
	// BatchSubmit.BatchID (metadata, display name or Idempotency-Key).
	SubmitBatch(ctx context.Context, b BatchSubmit) (*BatchHandle, error)
	// FindBatch looks, after an ambiguous submission, for batches that
	// submission may have created: none when it established that none
	// exists, several when it cannot tell them apart. Processors whose
	// submission is idempotent (BatchInfo.IdempotentSubmit) are resubmitted
	// with the same key instead and may return an unsupported error here.
	FindBatch(ctx context.Context, q BatchQuery) ([]BatchHandle, error)
	// BatchStatus performs one status lookup.
	BatchStatus(ctx context.Context, providerID string) (*BatchStatus, error)
	// BatchResults fetches the results of a batch in a terminal state: one
	// BatchResult per item the provider reports on. Items the provider does
	// not report on are treated by the caller as expired. Fetching twice is
	// harmless.
	BatchResults(ctx context.Context, st *BatchStatus) ([]BatchResult, error)
}

// BatchInfo declares what a processor's batch API guarantees.
type BatchInfo struct {
	// IdempotentSubmit: the provider deduplicates submissions by an
	// Idempotency-Key, so an ambiguous submission is resent with the same
	// key rather than reconciled.
	IdempotentSubmit bool
	// ResultsRetention is how long the provider keeps a finished batch's
	// results (zero: unknown); stet fetches before it ends and alerts when
	// results expired unfetched.
	ResultsRetention time.Duration
	// MaxItems is the provider's limit on requests per batch (zero: none).
	MaxItems int
}

// BatchSubmit is one batch to submit.
type BatchSubmit struct {
	// BatchID is stet's own batch ID; it labels the provider's batch and is
	// the idempotency key where the provider honours one.
	BatchID string
	Items   []BatchItem
	// InputFileID is an input file an earlier, interrupted submission
	// uploaded and recorded; the processor reuses it instead of uploading
	// again. Empty when none.
	InputFileID string
	// BeforeCreate is called immediately before the creating call, with the
	// uploaded input file ID (empty when the processor sends requests
	// inline). The caller records that a submission is in flight; an error
	// aborts the submission before anything is created.
	BeforeCreate func(ctx context.Context, inputFileID string) error
}

// BatchItem is one request in a batch: the extraction of one job.
type BatchItem struct {
	// JobID identifies the item at the provider (custom_id, metadata key).
	JobID  string
	Params ExtractParams
}

// BatchHandle identifies a batch at the provider.
type BatchHandle struct {
	ProviderID   string
	InputFileID  string // empty when the requests went inline
	State        BatchState
	CreatedAt    time.Time
	RequestCount int
	RequestID    string
}

// BatchQuery describes an ambiguous submission to reconcile.
type BatchQuery struct {
	BatchID string
	// SubmittedAt is when the ambiguous submission started; a batch it
	// created was created at or after it (less clock skew).
	SubmittedAt time.Time
	ItemCount   int
	InputFileID string
}

// BatchState is a batch's state, in stet's words. Providers' own states
// map onto these (the provider's word is kept beside it).
type BatchState string

const (
	BatchIntent     BatchState = "intent"      // assembled, not yet submitted
	BatchSubmitted  BatchState = "submitted"   // the provider has it (validating, queued)
	BatchInProgress BatchState = "in_progress" // running, finalizing or cancelling
	BatchCompleted  BatchState = "completed"   // ended; results to fetch
	BatchFailed     BatchState = "failed"      // ended without results
	BatchExpired    BatchState = "expired"     // the window closed; partial results
	BatchCancelled  BatchState = "cancelled"   // cancelled; partial results
	BatchUnknown    BatchState = "unknown"     // a submission could not be reconciled: an operator decides
)

// BatchStates lists every batch state.
var BatchStates = []BatchState{BatchIntent, BatchSubmitted, BatchInProgress, BatchCompleted, BatchFailed, BatchExpired, BatchCancelled, BatchUnknown}

// Valid reports whether s is a known state.
func (s BatchState) Valid() bool { return slices.Contains(BatchStates, s) }

// Terminal reports whether the provider has finished with the batch.
func (s BatchState) Terminal() bool {
	switch s {
	case BatchCompleted, BatchFailed, BatchExpired, BatchCancelled:
		return true
	}
	return false
}

// BatchStatus is one status lookup's answer.
type BatchStatus struct {
	ProviderID    string
	ProviderState string // the provider's own word ("in_progress", "ended", "BATCH_STATE_RUNNING")
	State         BatchState
	// Files and locations of the provider's copies, recorded so that the
	// deletion workflow can delete them.
	InputFileID  string
	OutputFileID string
	ErrorFileID  string
	ResultsURL   string
	Total        int
	Succeeded    int
	Failed       int
	// ResultsExpireAt is when the provider discards the results (zero:
	// unknown).
	ResultsExpireAt time.Time
	RequestID       string
	StatusCode      int
	// Raw is the provider's answer as received (for stet batch status
	// --json). It holds no document text.
	Raw []byte
}

// BatchResult is one item's result.
type BatchResult struct {
	JobID string
	// Extraction is the item's answer; nil when Err is set.
	Extraction *Extraction
	// Err is the item's failure, classified: invalid_output, refusal,
	// unsupported, transient (server error, expired or cancelled item —
	// Code "batch_item_expired" or "batch_item_cancelled"), rate_limited.
	Err error
}

// Codes of batch items that ended without an answer.
const (
	CodeBatchItemExpired   = "batch_item_expired"
	CodeBatchItemCancelled = "batch_item_cancelled"
)
