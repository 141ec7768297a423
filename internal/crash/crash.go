// Package crash holds stet's crash-injection points for the recovery drills.
//
// When the environment variable STET_CRASH_AT names a point, the process
// kills itself with SIGKILL the first time it reaches that point: a real
// crash at an exact place, with no chance to clean up. Unset, a point costs
// one string comparison. It must never be set in production.
package crash

import (
	"os"
	"syscall"
)

// Points where a drill may crash the process.
const (
	AfterAccept   = "after_accept"   // the intake transaction committed; the answer is not sent
	MidCall       = "mid_call"       // the provider call is under way
	AfterArtifact = "after_artifact" // the artifact is saved; the commit has not run
	MidCommit     = "mid_commit"     // inside the commit transaction, before it commits
	// BeforeBatchCreate: the submission is recorded as in flight; the
	// provider's creating call is not sent.
	BeforeBatchCreate = "before_batch_create"
	// AfterBatchSubmit: the provider's creating call returned; its batch ID
	// is not yet persisted.
	AfterBatchSubmit = "after_batch_submit"
	// MidApply: one chunk of a batch's items is applied; the rest are not.
	MidApply = "mid_apply"
	// AfterTranscript: an audio report's transcript is saved; its
	// extraction has not started.
	AfterTranscript = "after_transcript"
)

var at = os.Getenv("STET_CRASH_AT")

// Armed reports whether STET_CRASH_AT names this point: a drill of a
// stage may need that stage to run on its own.
func Armed(name string) bool { return at != "" && at == name }

// Point kills the process if STET_CRASH_AT names this point.
func Point(name string) {
	if at != "" && at == name {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL is not instant; never run past the point
	}
}
