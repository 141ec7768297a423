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
	CodeProcessorNotPermitted = "processor_not_permitted"
	CodeRegionNotPermitted    = "region_not_permitted"
)

// Check returns nil if policy permits the processor described by info: its ID
// is one of the policy's processors and, when the policy lists regions, its
// region is one of them (compared case-insensitively). Otherwise it returns a
// *stet.ProcessorError of class stet.FailureBoundary with Code
// CodeProcessorNotPermitted or CodeRegionNotPermitted. A nil policy permits
// nothing. Check never suggests another processor: there is no fallback.
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
	if len(policy.Regions) > 0 && !slices.ContainsFunc(policy.Regions, func(r string) bool {
		return info.Region != "" && strings.EqualFold(r, info.Region)
	}) {
		return &stet.ProcessorError{
			Class: stet.FailureBoundary,
			Code:  CodeRegionNotPermitted,
			Err:   fmt.Errorf("region %q of processor %q is not permitted by policy %q", info.Region, info.ID, policy.ID),
		}
	}
	return nil
}
