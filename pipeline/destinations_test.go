package pipeline_test

import (
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/internal/stetclient"
	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/outbound"
)

var destSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("destination-secret-0123456789abc"))

// receiver is a destination: it verifies every POST with the Standard
// Webhooks reference library and answers what answer says.
type receiver struct {
	t      *testing.T
	wh     *standardwebhooks.Webhook
	mu     sync.Mutex
	answer func(n int) int // the status of the n-th POST (1-based)
	posts  []post
	bad    int // POSTs whose signature did not verify
}

type post struct {
	id   string
	body outbound.RecordEvent
	raw  string
}

func newReceiver(t *testing.T, answer func(n int) int) *receiver {
	wh, err := standardwebhooks.NewWebhook(destSecret)
	if err != nil {
		t.Fatal(err)
	}
	return &receiver{t: t, wh: wh, answer: answer}
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if err := rc.wh.Verify(b, r.Header); err != nil {
		rc.bad++
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var ev outbound.RecordEvent
	_ = json.Unmarshal(b, &ev)
	rc.posts = append(rc.posts, post{id: r.Header.Get("webhook-id"), body: ev, raw: string(b)})
	w.WriteHeader(rc.answer(len(rc.posts)))
}

func (rc *receiver) snapshot() ([]post, int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.posts), rc.bad
}

// serveAt starts h on addr (a loopback address nobody listened on so far).
func serveAt(t *testing.T, addr string, h http.Handler) {
	t.Helper()
	var ln net.Listener
	var err error
	for range 50 {
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// logOutbox logs a destination's outbox rows and its destinations row,
// times in microseconds, so that a failure shows the order things
// happened in.
func logOutbox(t *testing.T, e *stettest.Env, dest string) {
	t.Helper()
	rows, err := e.DB.Writer().Query(`SELECT event, record_id, state, attempts, COALESCE(last_status, 0), created_at, updated_at,
			COALESCE(lease_until, 0) FROM outbox WHERE destination_id = $1 ORDER BY created_at, id`, dest)
	if err != nil {
		t.Logf("read outbox: %v", err)
		return
	}
	for rows.Next() {
		var event, record, state string
		var attempts, status, created, updated, lease int64
		if err := rows.Scan(&event, &record, &state, &attempts, &status, &created, &updated, &lease); err != nil {
			t.Logf("read outbox: %v", err)
			break
		}
		t.Logf("outbox %s %s %s: state %s attempts %d last_status %d created %d updated %d lease_until %d",
			dest, event, record, state, attempts, status, created, updated, lease)
	}
	rows.Close()
	var disabled, status, updated sql.NullInt64
	if err := e.DB.Writer().QueryRow(`SELECT disabled_at, disabled_status, updated_at FROM destinations WHERE destination_id = $1`, dest).
		Scan(&disabled, &status, &updated); err != nil {
		t.Logf("read destination: %v", err)
		return
	}
	t.Logf("destination %s: disabled_at %d disabled_status %d updated %d", dest, disabled.Int64, status.Int64, updated.Int64)
}

func outboxStates(e *stettest.Env, dest string) map[string]int {
	rows, err := e.DB.Writer().Query(`SELECT state, COUNT(*) FROM outbox WHERE destination_id = $1 GROUP BY state`, dest)
	if err != nil {
		e.WaitFor("outbox", func() bool { return false })
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		_ = rows.Scan(&s, &n)
		out[s] = n
	}
	return out
}

// Drill 13: the destination is down (connection refused), then answers
// 500, then 200. Every event arrives at least once with the same
// webhook-id, verified by the reference library; nothing is lost; the
// sequence lets the receiver put a report's events back in order. A second
// destination answering 410 is disabled for the source and stops
// receiving, until it is enabled again.
func TestDrill13DestinationDownThen500Then200(t *testing.T) {
	t.Parallel()
	addr, err := stetclient.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	gone := newReceiver(t, func(int) int { return http.StatusGone })
	goneAddr, err := stetclient.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	serveAt(t, goneAddr, gone)
	e := stettest.New(t, stettest.Options{Destinations: []outbound.Destination{
		{SourceID: stettest.SourceReports, ID: "mod-tool", URL: "http://" + addr + "/hooks", Secret: destSecret,
			Events: []string{ledger.EventCommitted, ledger.EventDecided}, MaxAge: time.Hour},
		{SourceID: stettest.SourceReports, ID: "retired", URL: "http://" + goneAddr + "/hooks", Secret: destSecret,
			Events: []string{ledger.EventCommitted, ledger.EventDecided}, MaxAge: time.Hour},
	}})

	// Phase 1: down. Three records and a decision are committed; every
	// POST to mod-tool is refused.
	var jobs []string
	for i, r := range []stettest.Report{
		{ExternalID: "report-001", Revision: 1, Text: "Stop taking your insulin."},
		{ExternalID: "report-002", Revision: 1, Text: "A second report."},
		{ExternalID: "report-001", Revision: 2, Text: "Stop taking your insulin, edited."},
	} {
		d := e.Deliver(stettest.SourceReports, stettest.MustID(string(rune('a'+i))), r)
		if d.Status != http.StatusAccepted {
			t.Fatalf("deliver %d = %d %s", i, d.Status, d.Body)
		}
		e.WaitJob(d.JobID, stet.JobCommitted)
		jobs = append(jobs, d.JobID)
		if i == 0 { // revision 1 is decided before revision 2 arrives
			rec := e.Record(jobs[0])
			if st, b := e.Do(http.MethodPost, "/v1/review/"+rec.ID+"/decision", stettest.ReviewerToken,
				map[string]any{"decision": "approve"}, nil); st != http.StatusOK {
				t.Fatalf("decide = %d %s", st, b)
			}
		}
	}
	e.WaitFor("refused POSTs", func() bool {
		return e.Count("outbox", "destination_id = 'mod-tool' AND last_error = 'connect' AND attempts >= 2") >= 1
	})
	if n := e.Count("outbox", "destination_id = 'mod-tool'"); n != 4 {
		t.Fatalf("mod-tool outbox rows = %d, want 4 (3 committed, 1 decided)", n)
	}
	// The 410 destination took one POST and was disabled for the source.
	e.WaitFor("the 410 destination disabled", func() bool {
		return e.Count("destinations", "destination_id = 'retired' AND disabled_at IS NOT NULL AND disabled_status = 410") == 1
	})

	// Phase 2 and 3: the destination comes back answering 500 three times,
	// then 200.
	ok := newReceiver(t, func(n int) int {
		if n <= 3 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	serveAt(t, addr, ok)
	e.WaitFor("every mod-tool row delivered", func() bool {
		return outboxStates(e, "mod-tool")["delivered"] == 4
	})

	posts, bad := ok.snapshot()
	if bad != 0 {
		t.Errorf("POSTs that failed Standard Webhooks verification = %d, want 0", bad)
	}
	var want []string
	rows, err := e.DB.Writer().Query(`SELECT webhook_id FROM outbox WHERE destination_id = 'mod-tool' ORDER BY webhook_id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		_ = rows.Scan(&id)
		want = append(want, id)
	}
	rows.Close()
	got := map[string][]string{}
	for _, p := range posts {
		got[p.id] = append(got[p.id], p.raw)
	}
	for _, id := range want {
		if len(got[id]) == 0 {
			t.Errorf("event %s never arrived", id)
		}
	}
	if len(got) != len(want) {
		t.Errorf("distinct webhook-ids received = %d, want %d", len(got), len(want))
	}
	retried := 0
	for id, bodies := range got {
		if len(bodies) > 1 {
			retried++
		}
		var first outbound.RecordEvent
		_ = json.Unmarshal([]byte(bodies[0]), &first)
		if first.Type+"" == "" || ledger.WebhookID(first.Record.ID, first.Type) != id {
			t.Errorf("webhook-id %s carries a %q event of record %s", id, first.Type, first.Record.ID)
		}
	}
	if retried == 0 || len(posts) < len(want)+3 {
		t.Errorf("POSTs = %d for %d events with %d retried, want the three 500s retried under the same webhook-id", len(posts), len(want), retried)
	}
	// Ordering: a receiver that keeps, per report, the event with the
	// highest sequence ends at report-001's revision 2, whatever order the
	// retries arrived in.
	latest := map[string]outbound.RecordEvent{}
	seqs := map[string]map[int64]bool{}
	for _, p := range posts {
		r := p.body.Record
		if seqs[r.ReportID] == nil {
			seqs[r.ReportID] = map[int64]bool{}
		}
		seqs[r.ReportID][p.body.Sequence] = true
		if cur, ok := latest[r.ReportID]; !ok || p.body.Sequence > cur.Sequence {
			latest[r.ReportID] = p.body
		}
	}
	r1 := e.Record(jobs[2])
	if l := latest[r1.ReportID]; l.Record.ID != r1.ID || l.Record.Revision != 2 || !l.Record.Authoritative {
		t.Errorf("report-001's latest event by sequence = %s of %s rev %d (authoritative %v), want %s rev 2 authoritative",
			l.Type, l.Record.ID, l.Record.Revision, l.Record.Authoritative, r1.ID)
	}
	if n := len(seqs[r1.ReportID]); n != 3 {
		t.Errorf("report-001's distinct sequences = %d, want 3 (two commits, one decision)", n)
	}

	// The job view lists each delivery.
	var jv api.JobView
	if st, b := e.Do(http.MethodGet, "/v1/jobs/"+jobs[0], stettest.OperatorToken, nil, &jv); st != http.StatusOK {
		t.Fatalf("GET job = %d %s", st, b)
	}
	var views []string
	for _, d := range jv.Deliveries {
		views = append(views, d.Destination+" "+d.Event+" "+d.State)
		if d.Destination == "mod-tool" && (d.Attempts < 1 || d.LastStatus != http.StatusOK) {
			t.Errorf("job view delivery %+v, want attempts >= 1 and last status 200", d)
		}
	}
	slices.Sort(views)
	wantViews := []string{"mod-tool record.committed delivered", "mod-tool record.decided delivered",
		"retired record.committed disabled", "retired record.decided disabled"}
	if !slices.Equal(views, wantViews) {
		t.Errorf("job view deliveries = %q, want %q", views, wantViews)
	}

	// The 410 destination received exactly one POST: nothing after it.
	if gp, _ := gone.snapshot(); len(gp) != 1 {
		t.Errorf("POSTs to the 410 destination = %d, want 1", len(gp))
	}
	if st := outboxStates(e, "retired"); st["disabled"] != 4 || st["pending"] != 0 {
		t.Errorf("retired outbox states = %v, want 4 disabled", st)
		logOutbox(t, e, "retired")
	}
	// Enabled again, it receives what it held.
	gone.mu.Lock()
	gone.answer = func(int) int { return http.StatusNoContent }
	gone.mu.Unlock()
	n, err := e.DB.EnableDestination(t.Context(), stettest.SourceReports, "retired", "test", time.Now())
	if err != nil || n != 4 {
		t.Fatalf("EnableDestination = %d, %v, want 4 re-queued", n, err)
	}
	e.WaitFor("the re-enabled destination delivered", func() bool { return outboxStates(e, "retired")["delivered"] == 4 })
}

// With encryption at rest on, a destination still receives the record's
// classification in clear (the ledger opens it at delivery time), and the
// outbox never holds it: its rows carry IDs only.
func TestDestinationEncryptedRecord(t *testing.T) {
	t.Parallel()
	addr, err := stetclient.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	rc := newReceiver(t, func(int) int { return http.StatusOK })
	serveAt(t, addr, rc)
	e := stettest.New(t, stettest.Options{Keyring: testKeyring(t, "k1"), Destinations: []outbound.Destination{
		{SourceID: stettest.SourceReports, ID: "mod-tool", URL: "http://" + addr + "/hooks", Secret: destSecret,
			Events: []string{ledger.EventCommitted}, MaxAge: time.Hour},
	}})
	d := e.Deliver(stettest.SourceReports, "msg_enc_dest", stettest.Report{ExternalID: "report-enc-dest", Revision: 1, Text: "Stop taking your insulin."})
	if d.Status != http.StatusAccepted {
		t.Fatalf("deliver = %d %s", d.Status, d.Body)
	}
	e.WaitJob(d.JobID, stet.JobCommitted)
	e.WaitFor("the committed event", func() bool { p, _ := rc.snapshot(); return len(p) == 1 })
	posts, bad := rc.snapshot()
	if bad != 0 {
		t.Fatalf("POSTs failing verification = %d", bad)
	}
	var class map[string]any
	if err := json.Unmarshal(posts[0].body.Record.Classification, &class); err != nil || class["category"] == nil {
		t.Fatalf("delivered classification = %s (%v), want the opened JSON", posts[0].body.Record.Classification, err)
	}
	if strings.Contains(posts[0].raw, "stet:v1:") {
		t.Fatalf("delivered body carries a sealed value: %s", posts[0].raw)
	}
	var sealed string
	if err := e.DB.Writer().QueryRow(`SELECT classification FROM review_records WHERE job_id = (SELECT id FROM jobs WHERE public_id = stet_ulid($1))`, d.JobID).Scan(&sealed); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(sealed, "stet:v1:") {
		t.Fatalf("stored classification is not sealed")
	}
}
