package processor

import (
	"errors"
	"net/http"

	"github.com/stetlabs/stet"
)

// NoDeleteAPI is a stet.CopyDeleter's answer for a copy its provider's API
// cannot delete: unsupported with Code stet.CodeNoDeleteAPI. why names the
// missing route for the cause; it is never shown to a caller.
func NoDeleteAPI(why string) *stet.ProcessorError {
	return &stet.ProcessorError{Class: stet.FailureUnsupported, Code: stet.CodeNoDeleteAPI, Err: errors.New(why)}
}

// DeleteGone turns a classified delete failure into a stet.CopyDeleter's
// answer: a 404 means the copy is already gone, which is what the caller
// asked for, so it is nil; anything else is returned as it is. A nil pe is
// nil.
func DeleteGone(pe *stet.ProcessorError) error {
	if pe == nil || pe.StatusCode == http.StatusNotFound {
		return nil
	}
	return pe
}
