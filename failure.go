package stet

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// FailureClass is the one thing the pipeline decides retries from. Adapters
// classify provider errors once, at the boundary. See docs/design.md §2.
type FailureClass string

// Failure classes.
const (
	FailureNone          FailureClass = ""
	FailureTransient     FailureClass = "transient"      // retry with backoff, bounded
	FailureRateLimited   FailureClass = "rate_limited"   // snooze until Retry-After, no attempt spent
	FailureQuota         FailureClass = "quota"          // pause the processor, alert
	FailureAuth          FailureClass = "auth"           // pause the processor, alert
	FailureInvalidOutput FailureClass = "invalid_output" // repair within a budget, then manual
	FailureRefusal       FailureClass = "refusal"        // manual, flagged
	FailureUnsupported   FailureClass = "unsupported"    // manual, never retried
	FailureBoundary      FailureClass = "boundary"       // blocked, no call made
	FailureStore         FailureClass = "store"          // retry the store stage from the saved result
	FailureTextPurged    FailureClass = "text_purged"    // manual: the revision's text was purged (retention); never re-extracted
)

// FailureClasses lists every failure class.
var FailureClasses = []FailureClass{FailureTransient, FailureRateLimited, FailureQuota, FailureAuth, FailureInvalidOutput, FailureRefusal, FailureUnsupported, FailureBoundary, FailureStore, FailureTextPurged}

// Valid reports whether c is a known class.
func (c FailureClass) Valid() bool { return slices.Contains(FailureClasses, c) }

// ProcessorError is a classified processor failure. Its Error string holds
// only the class, status code and the provider's error code: never the
// provider's message, which may quote the document.
type ProcessorError struct {
	Class      FailureClass
	StatusCode int           // HTTP status, 0 if none was read
	Code       string        // the provider's machine-readable error code, if any
	RequestID  string        // the provider's request ID, for diagnosis
	RetryAfter time.Duration // from Retry-After or the provider's reset headers; 0 if none
	// Output is the processor's raw output for invalid_output, so a repair
	// request can quote it back to the model. Never logged.
	Output []byte
	// Problems are the validation messages for invalid_output. They name
	// schema locations, not document text.
	Problems []string
	Err      error // internal cause; may hold provider text, so never logged
}

func (e *ProcessorError) Error() string {
	s := "processor: " + string(e.Class)
	if e.StatusCode != 0 {
		s += fmt.Sprintf(" (status %d)", e.StatusCode)
	}
	if e.Code != "" {
		s += " code=" + e.Code
	}
	return s
}

// Unwrap returns the internal cause.
func (e *ProcessorError) Unwrap() error { return e.Err }

// RetryAfterOf returns how long the provider asked to wait before the next
// request (Retry-After and its kin), or zero.
func RetryAfterOf(err error) time.Duration {
	var pe *ProcessorError
	if errors.As(err, &pe) {
		return pe.RetryAfter
	}
	return 0
}

// ClassOf returns the failure class of err: the class of a *ProcessorError
// in its chain, transient for any other error.
func ClassOf(err error) FailureClass {
	if err == nil {
		return FailureNone
	}
	var pe *ProcessorError
	if errors.As(err, &pe) {
		return pe.Class
	}
	return FailureTransient
}
