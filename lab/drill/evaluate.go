package drill

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/stetlabs/stet/ledger"
)

type revKey struct {
	ExternalID string
	Revision   int64
}

type snapJob struct {
	ID, ReportID, ExternalID, ExtractionVersion, State, FailureClass string
	Revision                                                         int64
	// Part is the part's ID for the job of one part of a profile with
	// parts; "" for a revision's own job.
	Part string
}

type snapRecord struct {
	JobID, ReportID, Kind, FailureClass string
	Revision                            int64
	Authoritative                       bool
}

type snapArtifact struct {
	JobID     string
	CreatedAt int64 // unix microseconds
}

// snapshot is what the checker reads from the ledger.
type snapshot struct {
	Jobs      []snapJob
	Artifacts []snapArtifact
	Records   []snapRecord
	Attempts  map[string]int // job ID → attempt rows
	// AttemptStatus counts attempt rows by status (started, succeeded,
	// failed, abandoned, …).
	AttemptStatus map[string]int
	Stage         map[string]int // River state → stage jobs
}

func loadSnapshot(ctx context.Context, db *sql.DB) (*snapshot, error) {
	s := &snapshot{Attempts: map[string]int{}, AttemptStatus: map[string]int{}, Stage: map[string]int{}}
	scan := func(query string, row func(*sql.Rows) error) error {
		rows, err := db.QueryContext(ctx, query)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := row(rows); err != nil {
				return err
			}
		}
		return rows.Err()
	}
	// count fills m from a query of (key, count) rows.
	count := func(query string, m map[string]int) error {
		return scan(query, func(rows *sql.Rows) error {
			var k string
			var n int
			err := rows.Scan(&k, &n)
			m[k] = n
			return err
		})
	}
	// Rows refer to each other by integer keys; the checker names jobs and
	// reports by the public IDs the API answered with.
	err := scan(`SELECT j.public_id, r.public_id, COALESCE(r.external_id, ''), j.extraction_version, j.state, COALESCE(j.failure_class, ''), j.revision,
			COALESCE(j.part_id, '')
		FROM jobs j JOIN reports r ON r.id = j.report_id`, func(rows *sql.Rows) error {
		var j snapJob
		err := rows.Scan(publicID{"job", &j.ID}, publicID{"rep", &j.ReportID}, &j.ExternalID, &j.ExtractionVersion, &j.State, &j.FailureClass, &j.Revision,
			&j.Part)
		s.Jobs = append(s.Jobs, j)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("jobs: %w", err)
	}
	err = scan(`SELECT j.public_id, a.created_at FROM artifacts a JOIN jobs j ON j.id = a.job_id`, func(rows *sql.Rows) error {
		var a snapArtifact
		err := rows.Scan(publicID{"job", &a.JobID}, &a.CreatedAt)
		s.Artifacts = append(s.Artifacts, a)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("artifacts: %w", err)
	}
	err = scan(`SELECT j.public_id, r.public_id, rr.kind, COALESCE(rr.failure_class, ''), rr.revision, rr.authoritative
		FROM review_records rr JOIN jobs j ON j.id = rr.job_id JOIN reports r ON r.id = rr.report_id`, func(rows *sql.Rows) error {
		var r snapRecord
		err := rows.Scan(publicID{"job", &r.JobID}, publicID{"rep", &r.ReportID}, &r.Kind, &r.FailureClass, &r.Revision, &r.Authoritative)
		s.Records = append(s.Records, r)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("review records: %w", err)
	}
	err = scan(`SELECT j.public_id, COUNT(*) FROM attempts a JOIN jobs j ON j.id = a.job_id GROUP BY j.public_id`, func(rows *sql.Rows) error {
		var job string
		var n int
		err := rows.Scan(publicID{"job", &job}, &n)
		s.Attempts[job] = n
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("attempts: %w", err)
	}
	err = count(`SELECT status, COUNT(*) FROM attempts GROUP BY status`, s.AttemptStatus)
	if err != nil {
		return nil, fmt.Errorf("attempt statuses: %w", err)
	}
	err = count(`SELECT state, COUNT(*) FROM river_job WHERE kind IN ('stet_extract', 'stet_commit') GROUP BY state`, s.Stage)
	if err != nil {
		return nil, fmt.Errorf("river jobs: %w", err)
	}
	return s, nil
}

// publicID scans a stored public_id (the 16 bytes of its ULID) into the
// ID the API shows, with its prefix ("job", "rep", "rec").
type publicID struct {
	prefix string
	dst    *string
}

func (p publicID) Scan(v any) error {
	b, ok := v.([]byte)
	if !ok {
		return fmt.Errorf("scan %s ID: unexpected %T", p.prefix, v)
	}
	if *p.dst = ledger.PublicID(p.prefix, b); *p.dst == "" {
		return fmt.Errorf("scan %s ID: %d bytes, want 16", p.prefix, len(b))
	}
	return nil
}

// evaluate fills the result's ledger, provider and check counts from
// the deliveries' outcomes, the ledger snapshot and the fake's call log.
func evaluate(res *Result, plan []*delivery, snap *snapshot, calls []fakeCall) {
	res.Examples = nil
	shown := map[string]int{}
	example := func(check, format string, args ...any) {
		if shown[check] < 3 {
			shown[check]++
			res.Examples = append(res.Examples, check+": "+fmt.Sprintf(format, args...))
		}
	}
	// What the senders were told.
	type ack struct {
		jobs map[string]bool
		n202 int
	}
	acked := map[revKey]*ack{}
	planned := map[revKey]bool{}
	res.Acknowledged, res.Accepted202, res.Duplicate200, res.GivenUp = 0, 0, 0, 0
	for _, d := range plan {
		k := revKey{d.Rev.ExternalID, int64(d.Rev.Rev)}
		planned[k] = true
		if d.givenUp || !d.acked {
			res.GivenUp++
			continue
		}
		res.Acknowledged++
		a := acked[k]
		if a == nil {
			a = &ack{jobs: map[string]bool{}}
			acked[k] = a
		}
		a.jobs[d.jobID] = true
		if d.status == http.StatusAccepted {
			res.Accepted202++
			a.n202++
		} else {
			res.Duplicate200++
		}
	}
	res.AcknowledgedRevisions = len(acked)

	// What the ledger holds.
	jobsByKey := map[revKey][]snapJob{}
	jobsByVersion := map[string]int{}
	jobByID := map[string]snapJob{}
	res.ManualByClass = map[string]int{}
	res.Jobs, res.Committed, res.Manual, res.NotTerminal, res.Phantom = len(snap.Jobs), 0, 0, 0, 0
	// A revision's jobs (jobsByKey) leave out its parts' jobs
	// (partsByKey): they have no record of their own.
	partsByKey := map[revKey][]snapJob{}
	for _, j := range snap.Jobs {
		k := revKey{j.ExternalID, j.Revision}
		if j.Part != "" {
			partsByKey[k] = append(partsByKey[k], j)
		} else {
			jobsByKey[k] = append(jobsByKey[k], j)
		}
		jobsByVersion[fmt.Sprintf("%s\x00%d\x00%s", j.ExternalID, j.Revision, j.ExtractionVersion)]++
		jobByID[j.ID] = j
		switch {
		case j.Part != "" && (j.State == "committed" || j.State == "manual"):
			// a part's job: counted with its revision's (MixResult.PartJobs)
		case j.State == "committed":
			res.Committed++
		case j.State == "manual":
			res.Manual++
		default:
			res.NotTerminal++
		}
		if !planned[k] {
			res.Phantom++
			example("phantom", "job %s", j.ID)
		}
	}
	artifacts := map[string]int{}
	firstArtifact := map[string]int64{}
	for _, a := range snap.Artifacts {
		artifacts[a.JobID]++
		if t, ok := firstArtifact[a.JobID]; !ok || a.CreatedAt < t {
			firstArtifact[a.JobID] = a.CreatedAt
		}
	}
	records := map[string]int{}
	authoritative := map[string][]snapRecord{}
	highest := map[string]int64{}
	for _, r := range snap.Records {
		records[r.JobID]++
		if r.Kind == "manual" {
			res.ManualByClass[cmp.Or(r.FailureClass, "unknown")]++
		}
		if r.Authoritative {
			authoritative[r.ReportID] = append(authoritative[r.ReportID], r)
		}
		highest[r.ReportID] = max(highest[r.ReportID], r.Revision)
	}

	var dup Duplicates
	for job, n := range artifacts {
		if n > 1 {
			dup.ArtifactsPerJob++
			example("duplicated", "job %s has %d artifacts", job, n)
		}
	}
	for job, n := range records {
		if n > 1 {
			dup.RecordsPerJob++
			example("duplicated", "job %s has %d review records", job, n)
		}
	}
	for report, rs := range authoritative {
		if len(rs) > 1 {
			dup.AuthoritativePerReport++
			example("duplicated", "report %s has %d authoritative records", report, len(rs))
		}
	}
	for key, n := range jobsByVersion {
		if n > 1 {
			dup.JobsPerRevision++
			example("duplicated", "%s has %d jobs", strings.ReplaceAll(key, "\x00", " "), n)
		}
	}
	for k, a := range acked {
		if a.n202 > 1 {
			dup.Accepted202Twice++
			example("duplicated", "%s r%d was answered 202 %d times (jobs %s)", k.ExternalID, k.Revision, a.n202, jobList(a.jobs))
		}
	}
	res.DuplicatedDetail, res.Duplicated = dup, dup.total()

	// Every report with a record has exactly one authoritative record, on its
	// highest revision (all revisions are terminal by now).
	res.MisplacedAuthoritative = 0
	for report, top := range highest {
		rs := authoritative[report]
		if len(rs) == 0 || rs[0].Revision != top {
			res.MisplacedAuthoritative++
			example("misplaced authoritative", "report %s: highest revision %d, authoritative records %d", report, top, len(rs))
		}
	}

	// Lost: acknowledged, yet no review record. Unaccounted: the answers
	// disagree with each other or with the ledger, or the job is not done.
	res.Lost, res.Unaccounted = 0, 0
	for k, a := range acked {
		js := jobsByKey[k]
		hasRecord := false
		for _, j := range js {
			if records[j.ID] > 0 {
				hasRecord = true
			}
		}
		if !hasRecord {
			res.Lost++
			example("lost", "%s r%d acknowledged as job %s; ledger jobs %d, none with a review record", k.ExternalID, k.Revision, jobList(a.jobs), len(js))
		}
		switch {
		case len(a.jobs) != 1, len(js) != 1, !a.jobs[js[0].ID], js[0].State != "committed" && js[0].State != "manual":
			res.Unaccounted++
			ledgerJob, state := "none", ""
			if len(js) > 0 {
				ledgerJob, state = js[0].ID, js[0].State
			}
			example("unaccounted", "%s r%d acknowledged as job %s; the ledger has %d jobs for it (%s %s)", k.ExternalID, k.Revision, jobList(a.jobs), len(js), ledgerJob, state)
		}
	}

	// Extra calls: a provider call for a document whose job already had its
	// artifact when the call reached the provider. Both times come from this
	// machine's clock, in microseconds.
	res.ProviderCalls, res.UnmappedCalls, res.UnmappedCut, res.ExtraCalls = len(calls), 0, 0, 0
	res.ProviderCallsByStatus = map[string]int{}
	for _, c := range calls {
		status := "cut"
		if c.Status != 0 {
			status = strconv.Itoa(c.Status)
		}
		res.ProviderCallsByStatus[status]++
		if c.Batch {
			res.ProviderBatchCalls++
			continue
		}
		if c.Doc < 0 {
			// A body cut by a death mid-send reached no model: the fake could
			// not read it whole. A whole request without a marker is a call
			// the checker cannot map, and fails.
			if c.Incomplete {
				res.UnmappedCut++
				continue
			}
			res.UnmappedCalls++
			example("unmapped calls", "a whole request (%d bytes, %s, answered %s) without a document marker", c.Bytes, c.Path, status)
			continue
		}
		// A part's request is compared with its part's job, any other with
		// the revision's job.
		k := keyOf(c.Doc, int64(c.Rev))
		jobs := jobsByKey[k]
		if part := callPart(c.SchemaName); part != "" {
			jobs = nil
			for _, j := range partsByKey[k] {
				if j.Part == part {
					jobs = append(jobs, j)
				}
			}
		}
		for _, j := range jobs {
			if t, ok := firstArtifact[j.ID]; ok && c.At.UnixMicro() > t {
				res.ExtraCalls++
				example("extra calls", "job %s called %dµs after its artifact was saved", j.ID, c.At.UnixMicro()-t)
			}
		}
	}
	res.AttemptRows = 0
	for _, n := range snap.Attempts {
		res.AttemptRows += n
	}
	res.AttemptsByStatus = snap.AttemptStatus
	res.AttemptsStarted = snap.AttemptStatus["started"]
	res.PendingStageJobs, res.DiscardedStageJobs = 0, snap.Stage["discarded"]
	for state, n := range snap.Stage {
		switch state {
		case "completed", "cancelled", "discarded":
		default:
			res.PendingStageJobs += n
		}
	}
}

// jobList prints a set of job IDs in order.
func jobList(jobs map[string]bool) string {
	ids := make([]string, 0, len(jobs))
	for id := range jobs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return strings.Join(ids, ",")
}

// judge sets Pass and Failures from the counts.
func (r *Result) judge() {
	r.Failures = []string{}
	check := func(n int, what string) {
		if n != 0 {
			r.Failures = append(r.Failures, fmt.Sprintf("%s: %d", what, n))
		}
	}
	check(r.Lost, "lost")
	check(r.Duplicated, "duplicated")
	check(r.ExtraCalls, "extra calls")
	check(r.Unaccounted, "unaccounted acknowledged revisions")
	check(r.MisplacedAuthoritative, "reports whose authoritative record is not on the highest revision")
	check(r.Phantom, "ledger jobs the drill never delivered")
	check(r.UnmappedCalls, "whole provider requests without a document marker (extra calls cannot be counted)")
	check(r.GivenUp, "deliveries never acknowledged after the heal")
	check(r.NotTerminal, "jobs not terminal after the drain")
	check(r.PendingStageJobs, "stage jobs River still holds after the drain")
	check(r.AttemptsStarted, "attempts left started after the drain (each must be finished or abandoned)")
	if m := r.Mix; m != nil {
		check(m.PartsRevisions-m.PartsRecords, "acknowledged revisions of the parts source without their one record")
		check(m.PartsRecords-m.WithProvenance, "records of the parts source without provenance for every field")
		check(m.PartJobsWrong, "revision jobs of the parts profile without exactly two part jobs")
		check(m.PendingCalls, "provider calls to the processor whose declaration is pending")
		check(m.UndecidedReroutes, "jobs of the reroute source extracted without a boundary decision")
	}
	if d := r.Destination; d != nil {
		check(d.Lost, "record events lost on the way to the destination")
		check(d.NotDelivered, "outbox rows not delivered")
		check(d.BadSignatures, "destination POSTs failing signature verification")
	}
	rs := r.Resume
	if rs.Sync.Max > rs.BoundSeconds {
		r.Failures = append(r.Failures, fmt.Sprintf("time to resume of a dead worker's sync stage job: max %.1fs > bound %gs", rs.Sync.Max, rs.BoundSeconds))
	}
	if rs.Batch.Max > rs.BatchBoundSeconds {
		r.Failures = append(r.Failures, fmt.Sprintf("time to resume of a dead worker's batch job: max %.1fs > bound %gs", rs.Batch.Max, rs.BatchBoundSeconds))
	}
	check(rs.NotResumed, "stage jobs of dead workers never taken up")
	if b := r.Batch; b != nil {
		check(b.CreatedTwice, "stet batches the provider created more than once")
		check(b.Unknown, "provider batches no ledger batch names")
		check(b.Unfinished, "batches not ended and applied after the drain")
	}
	if r.Acknowledged == 0 {
		r.Failures = append(r.Failures, "no delivery was acknowledged")
	}
	r.Pass = len(r.Failures) == 0
}
