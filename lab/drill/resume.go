package drill

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"math"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/cluster"
)

// Time to resume: for every worker death (a SIGKILL, or a crash
// point the drill armed), the dead process's in-flight stage jobs are read
// from River right after the death, and watched until a live process takes
// each up. "Taken up" is read from the database:
//
//   - an extract job whose ledger job was leased (state extracting) at the
//     death: the started_at of the ledger job's next attempt;
//   - a batch job whose batch was leased at the death: the first poll that
//     sees the batch's lease_until change (a claim or a release), to the
//     poll interval;
//   - otherwise (a commit, a stage that had not claimed yet): River's
//     attempted_at of the first attempt by another client.
//
// River names its client after its host and start time (UTC, to the
// microsecond); the dead process's client is the one whose start time lies
// between the process's start and its readiness, and, where two processes
// started together, the one that is never seen working after the death.

// resumePoll is how often the tracker looks at the jobs it waits for.
const resumePoll = 200 * time.Millisecond

// stageKinds are the River kinds whose resumption is measured.
var stageKinds = []string{"stet_extract", "stet_commit", "stet_batch"}

// inflight is one stage job a dead process held.
type inflight struct {
	river       int64
	kind        string
	client      string
	attemptedAt time.Time
	job, batch  string // ledger job (extract, commit) or batch (stet_batch)
	ledgerLease bool   // extract: the ledger job was leased at the death
	ledgerN     int    // its attempt rows at the death
	ledgerState string // extract: the ledger job's state at the death
	beat        string // the dead client's heartbeat row at the death ("-": none)
	batchLease  sql.NullInt64
	batchLeased bool

	resumedAt time.Time // zero: not yet
	riverAt   time.Time // River's first attempt by another client
	againAt   time.Time // the first attempt of the job enqueued again for the same work
	freedAt   time.Time // first seen out of running (rescued) or claimed
	leaseEnd  time.Time // extract: the ledger lease's end, when leased
	how       string
	dropped   bool // its client turned out to be alive
}

// death is one worker death.
type death struct {
	proc  string
	pid   int
	at    time.Time
	cause string
	jobs  []*inflight
}

// resumeTracker records deaths and watches their jobs.
type resumeTracker struct {
	db *sql.DB
	mu sync.Mutex
	ds []*death
}

// died records the death of p at at: it reads the dead process's running
// stage jobs (retrying while the database does not answer).
func (t *resumeTracker) died(ctx context.Context, p *cluster.Process, at time.Time, cause string) {
	d := &death{proc: p.Name, pid: p.Pid, at: at, cause: cause}
	t.mu.Lock()
	for _, o := range t.ds {
		if o.proc == p.Name && o.pid == p.Pid {
			// One process, two causes: it crashed at its armed point
			// while the injector's SIGKILL was on its way.
			t.mu.Unlock()
			return
		}
	}
	t.ds = append(t.ds, d)
	t.mu.Unlock()
	lo, hi := p.Started.Add(-time.Second), at
	if r := p.ReadyAt(); !r.IsZero() {
		hi = r.Add(time.Second)
	}
	client := loggedClientID(p.LogPath)
	for try := 0; try < 50; try++ {
		jobs, err := t.running(ctx, at, client, lo, hi)
		if err == nil {
			t.mu.Lock()
			d.jobs = jobs
			t.mu.Unlock()
			break
		}
		if !sleep(ctx, resumePoll) {
			break
		}
	}
}

// loggedClientID returns the River client ID a stet process logged at
// start ("River client started", client_id), or "" if none is there.
func loggedClientID(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	m := clientIDLine.FindSubmatch(b)
	if m == nil {
		return ""
	}
	return string(m[1])
}

var clientIDLine = regexp.MustCompile(`"msg":"River client started"[^\n]*"client_id":"([^"]+)"`)

// running reads the stage jobs running since before at by the River client
// client, or, when the process's log did not name it, by a client that
// started within [lo, hi]; and the ledger leases they held.
func (t *resumeTracker) running(ctx context.Context, at time.Time, client string, lo, hi time.Time) ([]*inflight, error) {
	rows, err := t.db.QueryContext(ctx, `SELECT id, kind, attempted_at, COALESCE(attempted_by[array_upper(attempted_by, 1)], ''),
			COALESCE(args->>'job_id', ''), COALESCE(args->>'batch_id', '')
		FROM river_job WHERE state = 'running' AND kind = ANY($1) AND attempted_at < $2`, stageKinds, at)
	if err != nil {
		return nil, err
	}
	var out []*inflight
	for rows.Next() {
		j := &inflight{}
		if err := rows.Scan(&j.river, &j.kind, &j.attemptedAt, &j.client, &j.job, &j.batch); err != nil {
			rows.Close()
			return nil, err
		}
		if client != "" {
			if j.client == client {
				out = append(out, j)
			}
			continue
		}
		if st, ok := clientStart(j.client); ok && !st.Before(lo) && !st.After(hi) {
			out = append(out, j)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	beats := map[string]string{} // by client: its jobs share one heartbeat row
	for _, j := range out {
		if b, ok := beats[j.client]; ok {
			j.beat = b
		} else {
			var beat sql.NullInt64
			j.beat = "-"
			if err := t.db.QueryRowContext(ctx, `SELECT heartbeat_at FROM worker_heartbeats WHERE process_id = $1`, j.client).Scan(&beat); err == nil && beat.Valid {
				j.beat = fmt.Sprintf("%.1fs before", at.Sub(time.UnixMicro(beat.Int64)).Seconds())
			}
			beats[j.client] = j.beat
		}
		switch {
		case j.kind == "stet_extract":
			var state string
			var lease sql.NullInt64
			err := t.db.QueryRowContext(ctx, `SELECT j.state, j.lease_until, (SELECT COUNT(*) FROM attempts WHERE job_id = j.id)
				FROM jobs j WHERE j.public_id = stet_ulid($1)`, j.job).
				Scan(&state, &lease, &j.ledgerN)
			j.ledgerState = state
			if err != nil && err != sql.ErrNoRows {
				return nil, err
			}
			j.ledgerLease = state == "extracting" && lease.Valid && lease.Int64 > at.UnixMicro()
			if j.ledgerLease {
				j.leaseEnd = time.UnixMicro(lease.Int64)
			}
		case j.kind == "stet_batch":
			err := t.db.QueryRowContext(ctx, `SELECT lease_until FROM batches WHERE id = $1`, j.batch).Scan(&j.batchLease)
			if err != nil && err != sql.ErrNoRows {
				return nil, err
			}
			j.batchLeased = j.batchLease.Valid && j.batchLease.Int64 > at.UnixMicro()
		}
	}
	return out, nil
}

// clientStart reads the start time out of a River client ID: a worker's
// process ID (stet.NewID("proc"), which stet gives River as its client ID),
// or River's default (host_2006_01_02T15_04_05_000000, UTC).
func clientStart(id string) (time.Time, bool) {
	if t, ok := stet.IDTime(id); ok && strings.HasPrefix(id, "proc_") {
		return t, true
	}
	const layout = "2006_01_02T15_04_05_000000"
	if len(id) < len(layout) {
		return time.Time{}, false
	}
	s := id[len(id)-len(layout):]
	s = s[:len(s)-7] + "." + s[len(s)-6:]
	t, err := time.Parse("2006_01_02T15_04_05.000000", s)
	return t, err == nil
}

// watch polls until ctx ends.
func (t *resumeTracker) watch(ctx context.Context) {
	for sleep(ctx, resumePoll) {
		t.poll(ctx)
	}
}

// poll looks once at every job still waiting.
func (t *resumeTracker) poll(ctx context.Context) {
	t.mu.Lock()
	var wait []*inflight
	var deaths []*death
	for _, d := range t.ds {
		for _, j := range d.jobs {
			if j.resumedAt.IsZero() && !j.dropped {
				wait = append(wait, j)
				deaths = append(deaths, d)
			}
		}
	}
	t.mu.Unlock()
	if len(wait) == 0 {
		return
	}
	now := time.Now()
	ids := make([]int64, len(wait))
	for i, j := range wait {
		ids[i] = j.river
	}
	type row struct {
		state, client string
		at            sql.NullTime
		final         sql.NullTime
	}
	got := map[int64]row{}
	rows, err := t.db.QueryContext(ctx, `SELECT id, state, attempted_at, COALESCE(attempted_by[array_upper(attempted_by, 1)], ''), finalized_at
		FROM river_job WHERE id = ANY($1)`, ids)
	if err != nil {
		return
	}
	for rows.Next() {
		var id int64
		var r row
		if err := rows.Scan(&id, &r.state, &r.at, &r.client, &r.final); err != nil {
			rows.Close()
			return
		}
		got[id] = r
	}
	rows.Close()
	if rows.Err() != nil {
		return // a partial answer would read as jobs gone
	}
	// A live worker's liveness sweep enqueues a dead worker's stage again as
	// a new River job: its first attempt after the death resumes the work
	// (the dead row itself waits for River's rescue).
	again := t.reenqueued(ctx, wait, deaths)
	// Clients seen working after a death are alive: a job running under
	// them since after it.
	alive := map[string]time.Time{}
	if rows, err := t.db.QueryContext(ctx, `SELECT COALESCE(attempted_by[array_upper(attempted_by, 1)], ''), MAX(attempted_at)
		FROM river_job WHERE state = 'running' GROUP BY 1`); err == nil {
		for rows.Next() {
			var c string
			var at time.Time
			if rows.Scan(&c, &at) == nil {
				alive[c] = at
			}
		}
		rows.Close()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, j := range wait {
		d := deaths[i]
		if last, ok := alive[j.client]; ok && last.After(d.at) {
			dropClient(d, j.client)
			continue
		}
		r, ok := got[j.river]
		if !ok {
			j.resumedAt, j.how = now, "river job gone"
			continue
		}
		if at, ok := again.first(j, d.at); ok {
			if j.againAt.IsZero() {
				j.againAt = at
			}
			if !j.ledgerLease && !j.batchLeased {
				j.resumedAt, j.how = at, "river claim of the job enqueued again"
				if j.freedAt.IsZero() {
					j.freedAt = at
				}
				continue
			}
		}
		sameAttempt := r.at.Valid && r.at.Time.Equal(j.attemptedAt)
		if j.freedAt.IsZero() && (r.state != "running" || !sameAttempt) {
			j.freedAt = now
			if !sameAttempt && r.at.Valid && r.at.Time.Before(now) {
				j.freedAt = r.at.Time
			}
		}
		switch {
		case sameAttempt && r.client == j.client && r.state == "completed",
			r.at.Valid && r.at.Time.After(d.at) && r.client == j.client:
			// The attempt the drill thought dead completed, or its client
			// attempted the job again after the death: the client lives.
			// (River's rescue leaves the attempt as it was, and sets the
			// state available, retryable or discarded.)
			dropClient(d, j.client)
			continue
		case r.at.Valid && r.at.Time.After(d.at) && r.client != j.client:
			if j.riverAt.IsZero() {
				j.riverAt = r.at.Time
			}
			if !j.ledgerLease && !j.batchLeased {
				j.resumedAt, j.how = r.at.Time, "river claim"
			}
		case r.state == "discarded" || r.state == "cancelled":
			j.resumedAt, j.how = r.final.Time, "river "+r.state
		}
		if j.batchLeased && j.resumedAt.IsZero() {
			var lease sql.NullInt64
			if t.db.QueryRowContext(ctx, `SELECT lease_until FROM batches WHERE id = $1`, j.batch).Scan(&lease) == nil && lease != j.batchLease {
				j.resumedAt, j.how = now, "batch lease taken"
			}
		}
	}
}

// key names the stage work of j: its kind and ledger job or batch.
func (j *inflight) key() string { return j.kind + "/" + j.job + "/" + j.batch }

// reenqueued returns the River rows, other than the dead ones, that do
// the same stage work as a waiting job and were attempted after the
// earliest death. A row enqueued again for one death may itself be held by
// a later death (its claimer died before its ledger claim): it still
// resumed the first death's work when it was claimed.
func (t *resumeTracker) reenqueued(ctx context.Context, wait []*inflight, deaths []*death) attemptsByWork {
	var since time.Time
	var jobs, batches []string
	for i, j := range wait {
		if since.IsZero() || deaths[i].at.Before(since) {
			since = deaths[i].at
		}
		if j.batch != "" {
			batches = append(batches, j.batch)
		} else {
			jobs = append(jobs, j.job)
		}
	}
	out := attemptsByWork{}
	rows, err := t.db.QueryContext(ctx, `SELECT id, kind, COALESCE(args->>'job_id', ''), COALESCE(args->>'batch_id', ''), attempted_at
		FROM river_job WHERE kind = ANY($1) AND attempted_at > $2
		  AND (args->>'job_id' = ANY($3) OR args->>'batch_id' = ANY($4))`,
		stageKinds, since, jobs, batches)
	if err != nil {
		return out
	}
	defer rows.Close()
	for rows.Next() {
		j := &inflight{}
		var a rowAttempt
		if rows.Scan(&a.id, &j.kind, &j.job, &j.batch, &a.at) == nil {
			out[j.key()] = append(out[j.key()], a)
		}
	}
	return out
}

// rowAttempt is one River row's latest attempt.
type rowAttempt struct {
	id int64
	at time.Time
}

// attemptsByWork are River rows' latest attempts by stage work (key).
type attemptsByWork map[string][]rowAttempt

// first returns the earliest attempt after at of a row doing j's work
// other than j's own.
func (a attemptsByWork) first(j *inflight, at time.Time) (time.Time, bool) {
	var min time.Time
	for _, r := range a[j.key()] {
		if r.id != j.river && r.at.After(at) && (min.IsZero() || r.at.Before(min)) {
			min = r.at
		}
	}
	return min, !min.IsZero()
}

func dropClient(d *death, client string) {
	for _, j := range d.jobs {
		if j.client == client {
			j.dropped = true
		}
	}
}

// finish reads the ledger claims of the leased extract jobs and returns the
// figures.
func (t *resumeTracker) finish(ctx context.Context, syncBound, batchBound time.Duration) ResumeResult {
	t.mu.Lock()
	defer t.mu.Unlock()
	res := ResumeResult{BoundSeconds: syncBound.Seconds(), BatchBoundSeconds: batchBound.Seconds()}
	var syncD, batchD, freeD []float64
	for _, d := range t.ds {
		res.Deaths++
		clients := map[string]bool{}
		for _, j := range d.jobs {
			if j.dropped {
				continue
			}
			clients[j.client] = true
			if j.ledgerLease {
				// The job resumed at its first claim by a live process: a
				// new ledger attempt, or a River claim of the job enqueued
				// again, or of the dead row after River's rescue, whichever
				// came first. (A claimer killed before its ledger claim is a
				// death of its own: the job is among that death's, and its
				// wait from there is measured there.) With none of them the
				// job ended another way, or never resumed.
				j.resumedAt = time.Time{}
				var first sql.NullInt64
				err := t.db.QueryRowContext(ctx, `SELECT MIN(started_at) FROM attempts
					WHERE job_id = (SELECT id FROM jobs WHERE public_id = stet_ulid($1)) AND n > $2`, j.job, j.ledgerN).Scan(&first)
				if err == nil && first.Valid {
					j.resumedAt, j.how = time.UnixMicro(first.Int64), "ledger claim"
				}
				if !j.againAt.IsZero() && (j.resumedAt.IsZero() || j.againAt.Before(j.resumedAt)) {
					j.resumedAt, j.how = j.againAt, "river claim of the job enqueued again"
				}
				if !j.riverAt.IsZero() && (j.resumedAt.IsZero() || j.riverAt.Before(j.resumedAt)) {
					j.resumedAt, j.how = j.riverAt, "river claim"
				}
			}
			if j.kind == "stet_batch" && j.resumedAt.IsZero() {
				// A batch job whose resumption was not seen (its lease was
				// taken and given up between two looks, or it held no lease:
				// a look that found the batch held, or done) went on under
				// another job: the apply is when its work was taken up at
				// the latest. Without a lease, nothing was waiting on the
				// dead process if the batch was applied before the death.
				var applied sql.NullInt64
				if t.db.QueryRowContext(ctx, `SELECT applied_at FROM batches WHERE id = $1`, j.batch).Scan(&applied) == nil && applied.Valid {
					if at := time.UnixMicro(applied.Int64); at.After(d.at) {
						j.resumedAt, j.how = at, "batch applied"
					} else if !j.batchLeased {
						res.Moot++
						continue
					}
				}
			}
			res.Jobs++
			if j.resumedAt.IsZero() {
				res.NotResumed++
				if j.kind == "stet_batch" {
					res.NotResumedBatch++
				}
				if len(res.Examples) < 5 {
					res.Examples = append(res.Examples, fmt.Sprintf("%s (%s, at %s): %s %s never resumed (ledger %s, batch leased %v, river claim %s, enqueued again %s)",
						d.proc, d.cause, d.at.Format("15:04:05.000"), j.kind, cmpStr(j.job, j.batch), cmp.Or(j.ledgerState, "-"), j.batchLeased, since(d.at, j.riverAt), since(d.at, j.againAt)))
				}
				continue
			}
			if res.How == nil {
				res.How = map[string]int{}
			}
			res.How[j.how]++
			s := math.Max(0, j.resumedAt.Sub(d.at).Seconds())
			bound := syncBound
			if j.kind == "stet_batch" {
				bound = batchBound
			}
			if s > bound.Seconds() && len(res.Examples) < 5 {
				res.Examples = append(res.Examples, fmt.Sprintf("%s (%s, at %s): %s %s (ledger %s, client %s, its heartbeat %s) resumed after %.1fs by %s (river rescue or re-enqueue seen after %s, ledger lease end %s)",
					d.proc, d.cause, d.at.Format("15:04:05.000"), j.kind, cmpStr(j.job, j.batch), cmp.Or(j.ledgerState, "-"), j.client, j.beat, s, j.how, since(d.at, j.freedAt), since(d.at, j.leaseEnd)))
			}
			if j.kind == "stet_batch" {
				batchD = append(batchD, s)
			} else {
				syncD = append(syncD, s)
				// Claimable again: River rescued it and its ledger lease ended.
				free := j.freedAt
				if free.IsZero() || free.After(j.resumedAt) {
					free = j.resumedAt
				}
				if j.leaseEnd.After(free) && j.leaseEnd.Before(j.resumedAt) {
					free = j.leaseEnd
				}
				freeD = append(freeD, math.Max(0, free.Sub(d.at).Seconds()))
			}
		}
		if len(clients) > 1 {
			res.Ambiguous++
		}
	}
	res.Sync = summarize(syncD)
	res.Batch = summarize(batchD)
	res.SyncFreed = summarize(freeD)
	return res
}

func cmpStr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// summarize returns the count, p50, p95 and max of seconds.
func summarize(s []float64) Quantiles {
	if len(s) == 0 {
		return Quantiles{}
	}
	sort.Float64s(s)
	at := func(q float64) float64 { return s[max(0, int(math.Ceil(q*float64(len(s))))-1)] }
	return Quantiles{N: len(s), P50: round1(at(0.5)), P95: round1(at(0.95)), Max: round1(s[len(s)-1])}
}

func round1(f float64) float64 { return math.Round(f*10) / 10 }

// ResumeResult is the time-to-resume figure (Result.Resume).
type ResumeResult struct {
	// Deaths are the worker deaths measured: SIGKILLs and armed crash points.
	Deaths int `json:"deaths"`
	// Jobs are the stage jobs the dead processes held; NotResumed of them
	// were never taken up by the end of the drain.
	Jobs       int `json:"jobs"`
	NotResumed int `json:"not_resumed"`
	// NotResumedBatch are the batch jobs among them.
	NotResumedBatch int `json:"not_resumed_batch"`
	// Sync are the extract and commit jobs' waits, Batch the batch jobs',
	// in seconds from the death to the claim by a live process.
	Sync  Quantiles `json:"sync"`
	Batch Quantiles `json:"batch"`
	// SyncFreed are the same jobs' waits until they could be claimed again
	// (River rescued them and their ledger lease ended): Sync minus the
	// time they then queued behind other work.
	SyncFreed Quantiles `json:"sync_claimable"`
	// BoundSeconds bounds Sync.Max, BatchBoundSeconds Batch.Max.
	BoundSeconds      float64 `json:"bound_s"`
	BatchBoundSeconds float64 `json:"batch_bound_s"`
	// Ambiguous counts deaths whose River client the drill could not tell
	// from a live one (their jobs are all counted).
	Ambiguous int `json:"ambiguous"`
	// How counts how each resumption was seen: ledger claim, river claim,
	// batch lease taken, river discarded …
	How map[string]int `json:"how,omitempty"`
	// Moot are batch jobs a dead process ran without the batch's lease
	// whose batch was already applied: nothing waited on it.
	Moot     int      `json:"moot_batch_jobs"`
	Examples []string `json:"examples,omitempty"`
}

// Quantiles are n, p50, p95 and max of a set of waits, in seconds.
type Quantiles struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_s"`
	P95 float64 `json:"p95_s"`
	Max float64 `json:"max_s"`
}

func (q Quantiles) String() string {
	if q.N == 0 {
		return "none"
	}
	return fmt.Sprintf("p50 %.1fs, p95 %.1fs, max %.1fs (%d jobs)", q.P50, q.P95, q.Max, q.N)
}

// since formats t's distance from at for an example ("-" when t is zero).
func since(at, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return fmt.Sprintf("%.1fs", t.Sub(at).Seconds())
}
