package stet

import (
	"errors"
	"fmt"
)

// ErrorCode is a stable, caller-facing error category.
type ErrorCode string

// Error codes. HTTPStatus maps each to a status.
const (
	EInvalid      ErrorCode = "invalid"
	ENotFound     ErrorCode = "not_found"
	EConflict     ErrorCode = "conflict"
	EUnauthorized ErrorCode = "unauthorized"
	EForbidden    ErrorCode = "forbidden"
	EGone         ErrorCode = "gone"
	ETooLarge     ErrorCode = "too_large"
	EUnsupported  ErrorCode = "unsupported"
	EUnavailable  ErrorCode = "unavailable"
	EInternal     ErrorCode = "internal"
)

// Error is an error with a code and a message that is safe to show the
// caller: it never contains document text. The internal cause, if any, is
// kept apart for the log.
type Error struct {
	Code    ErrorCode
	Message string
	Cause   error
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Cause)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Unwrap returns the internal cause.
func (e *Error) Unwrap() error { return e.Cause }

// Errorf returns an *Error with a formatted, caller-safe message.
func Errorf(code ErrorCode, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCodeOf returns the code of the first *Error in err's chain, or
// EInternal.
func ErrorCodeOf(err error) ErrorCode {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	if errors.Is(err, ErrNotFound) {
		return ENotFound
	}
	return EInternal
}

// ErrorMessageOf returns the caller-safe message of err: the message of the
// first *Error in its chain, or a generic one.
func ErrorMessageOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	if errors.Is(err, ErrNotFound) {
		return "not found"
	}
	return "internal error"
}

// Sentinels, only where callers branch.
var (
	ErrNotFound  = errors.New("not found")
	ErrDuplicate = errors.New("duplicate")
	ErrLeaseLost = errors.New("lease lost: a newer attempt holds the job")
)
