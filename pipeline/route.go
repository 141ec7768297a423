package pipeline

// The boundary gate (docs/design.md §5): may this job's text go to this processor
// now? The synchronous extract stage, the batch assembler and the batch
// submission each ask route and act on its answer; none of them decides
// on its own. What the gate answers is a routeKind:
//
//	condition (checked in this order)                route    class
//	(P is the recorded policy's choice, or the processor an operator's
//	boundary decision moved the job to, judged by the policy in force)
//	the policy in force no longer permits P           block    boundary
//	P is not configured in this process               block    boundary
//	the recorded policy forbids P (region, …)         block    boundary
//	the job's profile (extraction version) is absent  block    unsupported
//	the revision's text was purged                    manual   text_purged
//	a dispatch pause covers P or the tenant           wait     —
//	otherwise                                         send P   —
//
// An operator's manual conversion (Manual, `stet manual --scope`) is a
// routeManual of its own (reason operator_manual) for waiting and blocked
// jobs: it carries the job's failure class and matches a processor scope
// against the processor this gate would choose.
//
// and, for the synchronous path only, admission toward P's provider limits
// (admitRoute) turns a send into a wait when the limiter says so. A batch is
// admitted by the provider's own batch limits.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/admission"
	"github.com/stetlabs/stet/boundary"
	"github.com/stetlabs/stet/ledger"
)

// routeKind is what the gate decides for one job.
type routeKind string

// The gate's decisions; the list is closed.
const (
	// routeSend: send the job's text to route.processor.
	routeSend routeKind = "send"
	// routeWait: send nothing now, spend no attempt, look again later (a
	// dispatch pause, or admission toward the provider's limits).
	routeWait routeKind = "wait"
	// routeBlock: send nothing until an operator acts (route.class); an
	// alert is raised. `stet resume` re-enqueues the job.
	routeBlock routeKind = "block"
	// routeManual: the job can never be extracted: a manual review record
	// carries route.class.
	routeManual routeKind = "manual"
)

// route is the gate's decision for one job.
type route struct {
	kind      routeKind
	processor string            // the processor decided for (every kind)
	class     stet.FailureClass // block, manual
	// reason is a stable code saying why (for logs and alerts; never text).
	reason string
	// wait is how long a wait lasts before the job looks again.
	wait time.Duration
	// For send: the recorded policy, the processor and the profile the
	// request is prepared with, and (after admitRoute) the admission ticket.
	recorded *stet.Policy
	proc     stet.Processor
	profile  *Profile
	ticket   *admission.Ticket
}

// Reasons the gate gives.
const (
	reasonNotPermitted  = "processor_no_longer_permitted"
	reasonNotConfigured = "processor_not_configured"
	reasonProfileAbsent = "profile_missing"
	reasonTextPurged    = "text_purged"
	reasonPaused        = "paused"
	reasonThrottled     = "throttled"
	// reasonOperatorManual: an operator turned a waiting or blocked job into
	// a manual review record (Manual).
	reasonOperatorManual = "operator_manual"
)

// gateJob is what the gate needs to know about a job.
type gateJob struct {
	ID                string
	TenantID          string
	PolicyHash        string // the policy recorded at acceptance
	ExtractionVersion string // the profile the job was accepted for
	TextPurged        bool
	// Processor, when set, is the processor to decide for (a batch's
	// processor at submission). Otherwise the gate chooses: the recorded
	// policy's primary, or an approved fallback after a transient or
	// rate-limited failure of the last attempt (LastProcessor, LastClass).
	Processor     string
	LastProcessor string
	LastClass     stet.FailureClass
	// Routed is the processor an operator's boundary decision moved the
	// job to (stet reroute): the gate decides for it alone, under the
	// policy in force, which the decision approved it by.
	Routed string
	// Work, when set, is the job as the extract stage read it, with the
	// dispatch pauses in force then; nil asks the ledger.
	Work *ledger.WorkItem
}

func gateJobOf(w *ledger.WorkItem) gateJob {
	return gateJob{ID: w.Job.ID, TenantID: w.Job.TenantID, PolicyHash: w.Job.PolicyHash,
		ExtractionVersion: w.Job.ExtractionVersion, TextPurged: w.TextPurged,
		LastProcessor: w.LastProcessor, LastClass: w.LastClass, Routed: w.Job.RoutedTo, Work: w}
}

// pauseCache remembers dispatch pauses by tenant and processor for the
// span of one sweep; a nil cache asks the ledger every time.
type pauseCache map[string]bool

// route is the boundary gate: it decides whether the job's text may go to
// a processor now, and which. It writes nothing; the caller acts on the
// decision (and raises the alert for a block, see alertBlocked).
func (p *Pipeline) route(ctx context.Context, j gateJob, pauses pauseCache) (route, error) {
	recorded, err := p.recordedPolicy(ctx, j.PolicyHash)
	if err != nil {
		return route{}, err
	}
	current := p.policies[recorded.ID]
	profile := p.profiles[j.ExtractionVersion]
	id := j.Processor
	switch {
	case id == "" && j.Routed != "":
		// An operator's boundary decision: judged by the policy in force
		// alone (gone since: blocked again), whose minimization applies.
		id = j.Routed
		if current != nil {
			recorded = current
		}
	case id == "":
		id = p.chooseProcessor(p.candidates(recorded, profile), recorded, current, j.LastProcessor, j.LastClass)
	}
	r := route{processor: id, recorded: recorded}
	if reason := p.forbidden(recorded, current, id); reason != "" {
		r.kind, r.class, r.reason = routeBlock, stet.FailureBoundary, reason
		return r, nil
	}
	if profile == nil {
		// A missing profile is a configuration error (a profile version
		// dropped from the config while jobs for it were pending), and an
		// operator can fix it: restore the profile, then `stet resume`.
		// So the job is blocked, on the sync and the batch path alike:
		// nothing is lost, because a blocked job keeps its text, waits and
		// raises an alert, whereas a manual record per job would turn one
		// config slip into a flood of manual reviews that no restored
		// profile can take back. A purged text (below) is different: it
		// can never be extracted again, so that job is manual.
		r.kind, r.class, r.reason = routeBlock, stet.FailureUnsupported, reasonProfileAbsent
		return r, nil
	}
	if j.TextPurged {
		r.kind, r.class, r.reason = routeManual, stet.FailureTextPurged, reasonTextPurged
		return r, nil
	}
	var paused bool
	if j.Work != nil {
		paused = j.Work.Paused(id) // read with the job: no second query
	} else if paused, err = p.paused(ctx, pauses, j.TenantID, id); err != nil {
		return route{}, err
	}
	if paused {
		// Pausing never rewrites the job: it waits in place.
		r.kind, r.reason, r.wait = routeWait, reasonPaused, p.cfg.PausedRecheck
		return r, nil
	}
	r.kind, r.proc, r.profile = routeSend, p.cfg.Processors[id], profile
	return r, nil
}

// forbidden says why processorID may not receive text under the recorded
// policy and the policy in force, or "" if it may. It is the one rule the
// gate, the fallback choice and hasFallback share.
func (p *Pipeline) forbidden(recorded, current *stet.Policy, processorID string) string {
	proc := p.cfg.Processors[processorID]
	switch {
	case current == nil || !current.Permits(processorID):
		// The policy was edited since acceptance: the job is never
		// re-routed, an operator decides.
		return reasonNotPermitted
	case proc == nil:
		return reasonNotConfigured
	}
	if err := boundary.Check(recorded, proc.Info()); err != nil {
		var pe *stet.ProcessorError
		if errors.As(err, &pe) && pe.Code != "" {
			return pe.Code
		}
		return boundary.CodeProcessorNotPermitted
	}
	return ""
}

// paused reports whether a dispatch pause covers the tenant or processor.
func (p *Pipeline) paused(ctx context.Context, cache pauseCache, tenantID, processorID string) (bool, error) {
	key := tenantID + "\x00" + processorID
	if v, ok := cache[key]; ok {
		return v, nil
	}
	pause, err := ledger.ActivePause(ctx, p.db.Reader(), tenantID, processorID)
	if err != nil {
		return false, err
	}
	if cache != nil {
		cache[key] = pause != nil
	}
	return pause != nil, nil
}

// admitRoute asks a send's processor for admission of a request of est
// tokens: a send with a ticket, or a wait for as long as the limiter says.
// A short wait is spent here, holding only the River job: a snooze costs
// writes on the ledger's one writer, a wait costs nothing.
func (p *Pipeline) admitRoute(ctx context.Context, r route, est int) route {
	if r.kind != routeSend {
		return r
	}
	ticket, wait := p.admit(r.processor, est)
	if ticket == nil && wait <= p.inlineAdmitWait() {
		ticket, wait = p.admitWithin(ctx, r.processor, est, p.inlineAdmitWait())
	}
	if ticket == nil {
		r.kind, r.reason, r.wait = routeWait, reasonThrottled, wait
		return r
	}
	r.ticket = ticket
	return r
}

// alertBlocked raises the alert every blocked job raises: IDs and codes
// only.
func (p *Pipeline) alertBlocked(log *slog.Logger, r route) {
	p.alert(log, "job_blocked", "processor", r.processor, "failure_class", string(r.class), "reason", r.reason)
}

// candidates are the processors a job of profile may go to under the
// recorded policy, first the primary: a part's own processors (each
// permitted by the policy, checked at config load), or the policy's.
func (p *Pipeline) candidates(recorded *stet.Policy, profile *Profile) []string {
	if profile != nil && len(profile.Processors) > 0 {
		return profile.Processors
	}
	return recorded.Processors
}

// chooseProcessor picks the processor for this attempt among candidates:
// the primary, or — only after a transient or rate-limited failure — the
// next of them that the gate would let through, wrapping back to the
// primary. Never a processor outside the recorded policy. If the primary
// itself is forbidden the primary is returned, and the gate blocks the
// job: it is never re-routed.
func (p *Pipeline) chooseProcessor(candidates []string, recorded, current *stet.Policy, lastProcessor string, lastClass stet.FailureClass) string {
	primary := candidates[0]
	if p.forbidden(recorded, current, primary) != "" || (lastClass != stet.FailureTransient && lastClass != stet.FailureRateLimited) {
		return primary
	}
	last := slices.Index(candidates, lastProcessor)
	for i := 1; i < len(candidates); i++ {
		id := candidates[(last+i)%len(candidates)]
		if p.forbidden(recorded, current, id) == "" {
			return id
		}
	}
	return primary
}

// hasFallback reports whether a transient or rate-limited failure of
// processorID, for a job of profile, can go to another approved processor
// at once.
func (p *Pipeline) hasFallback(policyHash string, profile *Profile, processorID string) bool {
	p.mu.Lock()
	recorded := p.oldPolicies[policyHash]
	p.mu.Unlock()
	if recorded == nil {
		return false
	}
	current := p.policies[recorded.ID]
	for _, id := range p.candidates(recorded, profile) {
		if id != processorID && p.forbidden(recorded, current, id) == "" {
			return true
		}
	}
	return false
}

// errUnknownRoute is what a switch over routeKind answers for a kind it
// does not know.
func errUnknownRoute(jobID string, r route) error {
	return fmt.Errorf("job %s: unknown route %q", jobID, r.kind)
}
