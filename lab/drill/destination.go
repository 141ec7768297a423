package drill

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// envDestSecret names the drill destination's whsec_ secret.
const envDestSecret = "STET_DRILL_DEST_SECRET"

// destLimit bounds the wait, after the drain, for the outbox to empty.
const destLimit = 3 * time.Minute

// receiver is the drill's destination (Options.Destination): it verifies
// every POST with the Standard Webhooks reference library, answers 500 to
// a seeded share of them, and counts each webhook-id it acknowledged.
type receiver struct {
	ln   net.Listener
	srv  *http.Server
	wh   *standardwebhooks.Webhook
	mu   sync.Mutex
	rng  *rand.Rand
	rate float64
	got  map[string]int // webhook-id → POSTs answered 200
	n500 int
	bad  int
}

func newReceiver(seed int64, secret string, rate float64) (*receiver, error) {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &receiver{ln: ln, wh: wh, rng: rand.New(rand.NewPCG(uint64(seed), 13)), rate: rate, got: map[string]int{}}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second}
	go r.srv.Serve(ln)
	return r, nil
}

func (r *receiver) url() string { return "http://" + r.ln.Addr().String() + "/hooks" }

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body := make([]byte, 0, 1024)
	buf := make([]byte, 4096)
	for {
		n, err := req.Body.Read(buf)
		body = append(body, buf[:n]...)
		if err != nil {
			break
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.wh.Verify(body, req.Header); err != nil {
		r.bad++
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if r.rng.Float64() < r.rate {
		r.n500++
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	r.got[req.Header.Get("webhook-id")]++
	w.WriteHeader(http.StatusOK)
}

func (r *receiver) close() { r.srv.Close() }

// waitOutbox waits until no outbox row is pending, or destLimit passes.
func waitOutbox(ctx context.Context, db *sql.DB, say func(string, ...any)) {
	deadline := time.Now().Add(destLimit)
	for time.Now().Before(deadline) {
		var pending int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM outbox WHERE state = 'pending'`).Scan(&pending); err == nil && pending == 0 {
			return
		}
		if !sleep(ctx, 500*time.Millisecond) {
			return
		}
	}
	say("outbox limit %s reached", destLimit)
}

// evaluateDestination counts the record events lost on the way to the
// receiver: every committed or manual review record must have its
// record.committed webhook-id acknowledged at least once.
func evaluateDestination(ctx context.Context, res *Result, db *sql.DB, r *receiver) error {
	rows, err := db.QueryContext(ctx, `SELECT public_id FROM review_records`)
	if err != nil {
		return err
	}
	defer rows.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	d := &DestinationResult{Received: len(r.got), Status500: r.n500, BadSignatures: r.bad}
	for rows.Next() {
		var id string
		if err := rows.Scan(publicID{"rec", &id}); err != nil {
			return err
		}
		d.Events++
		switch n := r.got["evt_"+id+"_record.committed"]; {
		case n == 0:
			d.Lost++
			if len(res.Examples) < 10 {
				res.Examples = append(res.Examples, fmt.Sprintf("record %s: record.committed never acknowledged", id))
			}
		case n > 1:
			d.Redelivered++
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, n := range r.got {
		d.POSTs200 += n
	}
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM outbox WHERE state <> 'delivered'`).Scan(&d.NotDelivered); err != nil {
		return err
	}
	res.Destination = d
	return nil
}

// DestinationResult is the destination variant's outcome
// (Options.Destination).
type DestinationResult struct {
	Events        int `json:"events"`         // record.committed events expected (one per review record)
	Received      int `json:"received"`       // distinct webhook-ids acknowledged
	POSTs200      int `json:"posts_200"`      // POSTs answered 200, redeliveries included
	Redelivered   int `json:"redelivered"`    // events acknowledged more than once (at least once, deduped by webhook-id)
	Status500     int `json:"status_500"`     // POSTs the receiver answered 500 on purpose
	BadSignatures int `json:"bad_signatures"` // POSTs failing Standard Webhooks verification
	Lost          int `json:"lost"`           // events never acknowledged
	NotDelivered  int `json:"not_delivered"`  // outbox rows not delivered after the wait
}
