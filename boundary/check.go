// Package boundary is the processor boundary: nothing leaves stet for a
// processor that the job's recorded policy does not permit, and text that
// leaves is minimized first.
//
// Check decides whether a processor is inside a policy's boundary; Minimizer
// replaces the identifiers a policy selects with typed placeholders; Keyring
// and DataKey seal text at rest (envelope.go). This
// package must never log, return in an error or otherwise expose the text it
// minimizes or the names in a policy's dictionary: only the minimized text and
// counts per identifier class leave it.
package boundary

import (
	"fmt"
	"slices"
	"strings"

	"github.com/stetlabs/stet"
)

// Codes of the boundary errors Check returns, in stet.ProcessorError.Code.
const (
	CodeProcessorNotPermitted    = "processor_not_permitted"
	CodeRegionNotPermitted       = "region_not_permitted"
	CodeSubprocessorNotPermitted = "subprocessor_not_permitted"
	// CodeAudioNotPermitted: the policy does not say audio: allow.
	CodeAudioNotPermitted = "audio_not_permitted"
	// CodePendingPrefix starts the code of a processor with an unanswered
	// declaration: "pending:retention".
	CodePendingPrefix = "pending:"
)

// Check returns nil if policy permits the processor described by info: its ID
// is one of the policy's processors and, when the policy lists regions, its
// region is one of them (compared case-insensitively), every subprocessor it
// declares is one the policy allows, and none of its boundary declarations
// is pending. Otherwise it returns a *stet.ProcessorError of class
// stet.FailureBoundary with Code CodeProcessorNotPermitted,
// CodeRegionNotPermitted, CodeSubprocessorNotPermitted or "pending:<the
// first pending declaration>". A nil policy permits nothing. Check never
// suggests another processor: there is no fallback.
func Check(policy *stet.Policy, info stet.ProcessorInfo) error {
	if policy == nil {
		return &stet.ProcessorError{
			Class: stet.FailureBoundary,
			Code:  CodeProcessorNotPermitted,
			Err:   fmt.Errorf("no policy recorded for processor %q", info.ID),
		}
	}
	if !policy.Permits(info.ID) {
		return &stet.ProcessorError{
			Class: stet.FailureBoundary,
			Code:  CodeProcessorNotPermitted,
			Err:   fmt.Errorf("processor %q is not permitted by policy %q", info.ID, policy.ID),
		}
	}
	return checkDeclarations(policy, info)
}

// CheckTranscriber is Check for a transcriber (docs/design.md §19): the
// policy must say audio may leave (audio cannot be minimized) and list the
// transcriber under its transcribers; then its region, subprocessors and
// pending declarations are judged as a processor's are. A refusal is a
// *stet.ProcessorError of class stet.FailureBoundary with Code
// CodeAudioNotPermitted, CodeProcessorNotPermitted or one of Check's.
func CheckTranscriber(policy *stet.Policy, info stet.ProcessorInfo) error {
	switch {
	case policy == nil || !policy.AudioAllowed:
		return &stet.ProcessorError{
			Class: stet.FailureBoundary,
			Code:  CodeAudioNotPermitted,
			Err:   fmt.Errorf("the policy does not allow audio to leave for transcriber %q", info.ID),
		}
	case !slices.Contains(policy.Transcribers, info.ID):
		return &stet.ProcessorError{
			Class: stet.FailureBoundary,
			Code:  CodeProcessorNotPermitted,
			Err:   fmt.Errorf("transcriber %q is not permitted by policy %q", info.ID, policy.ID),
		}
	}
	return checkDeclarations(policy, info)
}

// checkDeclarations is what Check and CheckTranscriber judge alike once the
// policy lists the ID: region, subprocessors, pending answers.
func checkDeclarations(policy *stet.Policy, info stet.ProcessorInfo) error {
	if len(policy.Regions) > 0 && !slices.ContainsFunc(policy.Regions, func(r string) bool {
		return info.Region != "" && strings.EqualFold(r, info.Region)
	}) {
		return &stet.ProcessorError{
			Class: stet.FailureBoundary,
			Code:  CodeRegionNotPermitted,
			Err:   fmt.Errorf("region %q of processor %q is not permitted by policy %q", info.Region, info.ID, policy.ID),
		}
	}
	for _, sub := range info.Subprocessors {
		if !policy.AllowsSubprocessor(sub) {
			return &stet.ProcessorError{
				Class: stet.FailureBoundary,
				Code:  CodeSubprocessorNotPermitted,
				Err:   fmt.Errorf("a subprocessor of processor %q is not allowed by policy %q", info.ID, policy.ID),
			}
		}
	}
	if len(info.Pending) > 0 {
		return &stet.ProcessorError{
			Class: stet.FailureBoundary,
			Code:  CodePendingPrefix + info.Pending[0],
			Err:   fmt.Errorf("processor %q has boundary declarations pending (%s)", info.ID, strings.Join(info.Pending, ", ")),
		}
	}
	return nil
}
