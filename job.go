package stet

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// JobState is the stage a job has reached. See docs/design.md §2.
type JobState string

// Job states.
const (
	JobAccepted   JobState = "accepted"   // revision, job and extract task committed
	JobExtracting JobState = "extracting" // a worker holds the attempt token
	JobWaiting    JobState = "waiting"    // rate limited or dispatch paused; no attempt spent
	JobBatched    JobState = "batched"    // assigned to a provider batch
	JobExtracted  JobState = "extracted"  // the artifact is saved; commit pending
	JobCommitted  JobState = "committed"  // the review record is written
	JobManual     JobState = "manual"     // terminal extraction failure; a manual record is written
	JobBlocked    JobState = "blocked"    // boundary violation or processor auth/quota: no call made
	JobCancelled  JobState = "cancelled"  // deleted
)

// JobStates lists every job state.
var JobStates = []JobState{JobAccepted, JobExtracting, JobWaiting, JobBatched, JobExtracted, JobCommitted, JobManual, JobBlocked, JobCancelled}

// Valid reports whether s is a known state.
func (s JobState) Valid() bool { return slices.Contains(JobStates, s) }

// Terminal reports whether a job in state s will do no more work on its own.
func (s JobState) Terminal() bool {
	switch s {
	case JobCommitted, JobManual, JobCancelled:
		return true
	case JobAccepted, JobExtracting, JobWaiting, JobBatched, JobExtracted, JobBlocked:
		return false
	default:
		panic(fmt.Sprintf("unknown job state %q", string(s)))
	}
}

// Job is one extraction job: one per revision and extraction version.
type Job struct {
	ID                string
	ReportID          string
	TenantID          string
	SourceID          string
	Revision          int64
	ExtractionVersion string
	ProfileID         string
	ProfileVersion    int
	PolicyID          string
	PolicyHash        string
	State             JobState
	Attempt           int64 // the fencing token: bumped at every claim
	LeaseUntil        time.Time
	FailureClass      FailureClass
	ReviewRecordID    string
	CreatedAt         time.Time
	UpdatedAt         time.Time
	ExtractingAt      time.Time // zero if never claimed
	ExtractedAt       time.Time
	CommittedAt       time.Time
	// BlockedProcessor and BlockedReason say, while the job is blocked,
	// which processor the boundary gate refused and its reason code.
	BlockedProcessor string
	BlockedReason    string
	// RoutedTo is the processor an operator's boundary decision moved the
	// job to (stet reroute); "" while the recorded policy decides.
	RoutedTo string
	// ParentID and PartID are set on the job of one part of a profile with
	// parts (docs/design.md §16): the revision's job, which writes the one
	// review record once every part has settled, and the part's ID.
	ParentID string
	PartID   string
}

// AttemptStatus is the outcome of one processor call as the ledger saw it.
type AttemptStatus string

// Attempt statuses.
const (
	AttemptSucceeded  AttemptStatus = "succeeded"  // the output became the job's artifact
	AttemptFailed     AttemptStatus = "failed"     // the call failed with a failure class
	AttemptSuperseded AttemptStatus = "superseded" // a stale worker's result; never the artifact
	AttemptRepair     AttemptStatus = "repair"     // invalid output that led to a repair request
	// AttemptAbandoned: the call was cut by a crash (its lease taken over)
	// or a graceful shutdown; its outcome is unknown and the provider may
	// have billed it. It is not counted against max_attempts.
	AttemptAbandoned AttemptStatus = "abandoned"
)

// Attempt records one processor call.
type Attempt struct {
	JobID        string
	N            int   // 1, 2, 3… per job
	Token        int64 // the job's attempt token when the call was made
	Processor    string
	Model        string
	RequestID    string
	StatusCode   int
	Status       AttemptStatus
	FailureClass FailureClass
	InputTokens  int
	OutputTokens int
	LatencyMS    int64
	InputSHA256  string // SHA-256 of the minimized input that was sent
	BatchID      string // the provider batch the call went in; empty for a synchronous call
	StartedAt    time.Time
	// CostUSD is the attempt's tokens at its processor's price in force
	// when it started (less the batch discount); nil when the processor
	// has no price.
	CostUSD *float64
}

// Artifact is the authoritative, validated result of a job's extraction.
type Artifact struct {
	ID            string
	JobID         string
	Raw           []byte          // the processor's raw response body; purged with retention
	Output        json.RawMessage // normalized JSON, valid against the profile schema
	SchemaVersion string
	Processor     string
	Model         string
	CreatedAt     time.Time
}

// RecordKind says how a review record came to be.
type RecordKind string

// Record kinds.
const (
	RecordExtracted RecordKind = "extracted" // from a validated artifact
	RecordManual    RecordKind = "manual"    // extraction failed for good; a person classifies it
)

// RecordState is where a review record is in human review.
type RecordState string

// Record states.
const (
	RecordPending RecordState = "pending"
	RecordDecided RecordState = "decided"
)

// Decision is a reviewer's verdict on a record.
type Decision string

// Decisions.
const (
	DecisionApprove  Decision = "approve"
	DecisionOverride Decision = "override"
	DecisionReject   Decision = "reject"
)

// Decisions lists every decision.
var Decisions = []Decision{DecisionApprove, DecisionOverride, DecisionReject}

// ReviewRecord is the destination record a human reviews: one per job.
type ReviewRecord struct {
	ID             string
	JobID          string
	ReportID       string
	TenantID       string
	SourceID       string
	Revision       int64
	Kind           RecordKind
	State          RecordState
	Authoritative  bool
	Classification json.RawMessage // the artifact's output; null for manual records until decided
	FailureClass   FailureClass    // why a manual record is manual
	Decision       Decision
	DecidedBy      string
	DecidedAt      time.Time
	Note           string
	CreatedAt      time.Time
	// ClassificationPurgedAt and NotePurgedAt are set when retention
	// purged the classification or the note: reads show the stamp instead.
	ClassificationPurgedAt time.Time
	NotePurgedAt           time.Time
	// FailedPart is, for a manual record of a profile with parts, the part
	// that failed for good; Provenance says, field by field, which part,
	// processor and model produced the record's classification.
	FailedPart string
	Provenance map[string]FieldSource
	// Superseded says a newer revision of the report exists: the record is
	// no longer what the source holds (docs/design.md §17).
	Superseded bool
	// Decisions are every decision on the record, oldest first; filled by
	// the reads of one record, not by lists. Reopens counts how often an
	// operator put it back to pending.
	Decisions []RecordDecision
	Reopens   int
}

// RecordDecision is one decision on a review record, as it was made.
type RecordDecision struct {
	Decision Decision
	// Classification is what the decision decided: an override's own, or
	// the record's classification then. Nil once retention purged it.
	Classification json.RawMessage
	Note           string
	Actor          string
	At             time.Time
}

// FieldSource is where one top-level field of a record came from.
type FieldSource struct {
	Part      string `json:"part"`
	Processor string `json:"processor"`
	Model     string `json:"model"`
}

// Role is what a bearer token may do.
type Role string

// Roles, weakest first.
const (
	RoleReader   Role = "reader"
	RoleReviewer Role = "reviewer"
	RoleOperator Role = "operator"
)

// Roles lists every role, weakest first.
var Roles = []Role{RoleReader, RoleReviewer, RoleOperator}

// Allows reports whether a token with role r may act as role need.
func (r Role) Allows(need Role) bool {
	return slices.Index(Roles, r) >= slices.Index(Roles, need) && slices.Contains(Roles, r)
}
