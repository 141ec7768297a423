package drill

import (
	"encoding/json"
	"fmt"
	mathrand "math/rand/v2"
	"regexp"
	"sort"
	"time"
)

// docRevision is one (report, revision) the drill delivers.
type docRevision struct {
	Doc        int
	Rev        int
	ExternalID string
	Source     string // the source it is delivered to
	Marker     string // in the text, so a provider call maps back to it
	Body       []byte
}

// delivery is one message; the outcome fields are written only by the
// goroutine that sends it.
type delivery struct {
	Rev       *docRevision
	WebhookID string
	Kind      string // first | new_revision | same_webhook_id | new_webhook_id

	acked   bool
	givenUp bool
	status  int
	jobID   string
}

// The marker has no separators, so no minimizer pattern (phone, date, SSN,
// IP) can take it: letters and one group of six digits.
var markerRe = regexp.MustCompile(`drilldoc(\d{6})r(\d{1,2})`)

func marker(doc, rev int) string      { return fmt.Sprintf("drilldoc%06dr%d", doc, rev) }
func externalID(doc int) string       { return fmt.Sprintf("chaos-%06d", doc) }
func webhookID(doc, k int) string     { return fmt.Sprintf("msg_chaos_%06d_%02d", doc, k) }
func keyOf(doc int, rev int64) revKey { return revKey{externalID(doc), rev} }

var texts = []string{
	"Post %s. I have lived with this condition for years and want to share what helped me sleep through the flares.",
	"Post %s. Does anyone else get tired after the infusion? My nurse said it is common but I would like to hear from you.",
	"Post %s. Grateful for this group today; the new clinic finally listened and we changed the plan together.",
	"Post %s. Buy my herbal drops, cheaper than the pharmacy, message me for a discount code.",
}

// planLoad builds the seeded load: every report is delivered 2–10 times;
// about a fifth get a second revision with new content. Redeliveries reuse a
// webhook-id (the same message again) or use a new one with the same content.
// The deliveries are shuffled.
func planLoad(seed int64, reports int) ([]*docRevision, []*delivery) {
	r := mathrand.New(mathrand.NewPCG(uint64(seed), 1))
	var revs []*docRevision
	var all []*delivery
	for doc := 0; doc < reports; doc++ {
		nrev := 1
		if r.Float64() < 0.2 {
			nrev = 2
		}
		n := 2 + r.IntN(9)
		mine := make([]*docRevision, nrev)
		for i := range mine {
			rev := i + 1
			text := fmt.Sprintf(texts[r.IntN(len(texts))], marker(doc, rev))
			if rev > 1 {
				text = "Edited: " + text
			}
			body, _ := json.Marshal(map[string]any{"external_id": externalID(doc), "revision": rev, "text": text})
			mine[i] = &docRevision{Doc: doc, Rev: rev, ExternalID: externalID(doc), Source: source, Marker: marker(doc, rev), Body: body}
		}
		revs = append(revs, mine...)
		ds := []*delivery{{Rev: mine[0], WebhookID: webhookID(doc, 0), Kind: "first"}}
		if nrev == 2 {
			ds = append(ds, &delivery{Rev: mine[1], WebhookID: webhookID(doc, 1), Kind: "new_revision"})
		}
		for len(ds) < n {
			rv := mine[r.IntN(nrev)]
			if r.IntN(2) == 0 {
				var same []*delivery
				for _, d := range ds {
					if d.Rev == rv {
						same = append(same, d)
					}
				}
				ds = append(ds, &delivery{Rev: rv, WebhookID: same[r.IntN(len(same))].WebhookID, Kind: "same_webhook_id"})
				continue
			}
			ds = append(ds, &delivery{Rev: rv, WebhookID: webhookID(doc, len(ds)), Kind: "new_webhook_id"})
		}
		all = append(all, ds...)
	}
	r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	return revs, all
}

// fault is one planned fault.
type fault struct {
	At     time.Duration
	Kind   string // kill | db_restart | arm
	Worker int
	Pause  time.Duration // kill: before the replacement starts
	Point  string        // arm: the crash point every worker is restarted with
}

// batchEvery: with Options.BatchFaults, every batchEvery-th report goes to
// the batch-mode source.
const batchEvery = 3

// useBatchSource sends every batchEvery-th report to the batch source.
func useBatchSource(revs []*docRevision) {
	for _, r := range revs {
		if r.Doc%batchEvery == 0 {
			r.Source = batchSource
		}
	}
}

// armFaults adds the batch faults: at a fifth of the window every worker is
// SIGKILLed and restarted with STET_CRASH_AT=after_batch_submit (each dies
// after its first batch create returns, before the batch ID is saved; the
// supervisor restarts it unarmed), and at half the window the same with
// mid_apply (each dies after applying a batch's first chunk).
func armFaults(fs []fault, window time.Duration) []fault {
	fs = append(fs, fault{At: window / 5, Kind: "arm", Point: "after_batch_submit"},
		fault{At: window / 2, Kind: "arm", Point: "mid_apply"})
	sort.SliceStable(fs, func(i, j int) bool { return fs[i].At < fs[j].At })
	return fs
}

// schedule plans the faults: kills 1–3 s apart, and one database
// restart somewhere in the middle. It returns the faults in time order and
// the load window the deliveries are spread over.
func schedule(seed int64, kills, workers int) ([]fault, time.Duration) {
	r := mathrand.New(mathrand.NewPCG(uint64(seed), 2))
	var fs []fault
	var t time.Duration
	for i := 0; i < kills; i++ {
		t += time.Second + time.Duration(r.Int64N(int64(2*time.Second)))
		fs = append(fs, fault{At: t, Kind: "kill", Worker: r.IntN(workers), Pause: time.Duration(r.Int64N(int64(500 * time.Millisecond)))})
	}
	window := max(t, minLoadWindow)
	at := time.Duration(float64(window) * (0.35 + 0.3*r.Float64()))
	fs = append(fs, fault{At: at, Kind: "db_restart"})
	sort.SliceStable(fs, func(i, j int) bool { return fs[i].At < fs[j].At })
	return fs, window
}
