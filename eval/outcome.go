package eval

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger"
)

// Outcome is what the production path made of one document with one
// processor, as its scratch ledger records it.
type Outcome struct {
	State        stet.JobState
	FailureClass stet.FailureClass // of a manual record
	// Output is the record's classification; nil without one.
	Output       map[string]json.RawMessage
	Model        string
	Calls        int
	Repairs      int // invalid answers that led to a repair request
	InputTokens  int
	OutputTokens int
	CallMS       []int64 // latency of every call
	// RecordMS is from the first call's start to the review record
	// (extracted or manual): retries, backoff and repairs included.
	RecordMS int64
	// Tokens are InputTokens and OutputTokens by the processor that spent
	// them: a profile with parts calls several.
	Tokens map[string][2]int
}

func collect(ctx context.Context, db *ledger.DB, jobs []string) ([]Outcome, error) {
	out := make([]Outcome, len(jobs))
	for i, id := range jobs {
		d, err := db.GetJob(ctx, Tenant, id)
		if err != nil {
			return nil, fmt.Errorf("read eval job %s: %w", id, err)
		}
		o := Outcome{State: d.Job.State, FailureClass: d.Job.FailureClass, Tokens: map[string][2]int{}}
		// A job of a profile with parts makes its calls in its parts' jobs.
		attempts := slices.Clone(d.Attempts)
		var models []string
		for _, part := range d.Parts {
			attempts = append(attempts, part.Attempts...)
			if part.State == stet.JobBlocked {
				o.State = stet.JobBlocked
			}
			for k := len(part.Attempts) - 1; k >= 0; k-- {
				if m := part.Attempts[k].Model; m != "" {
					if !slices.Contains(models, m) {
						models = append(models, m)
					}
					break
				}
			}
		}
		var start time.Time
		for _, a := range attempts {
			o.Calls++
			if a.Status == stet.AttemptRepair {
				o.Repairs++
			}
			o.InputTokens += a.InputTokens
			o.OutputTokens += a.OutputTokens
			t := o.Tokens[a.Processor]
			o.Tokens[a.Processor] = [2]int{t[0] + a.InputTokens, t[1] + a.OutputTokens}
			o.CallMS = append(o.CallMS, a.LatencyMS)
			if a.Model != "" {
				o.Model = a.Model
			}
			if !a.StartedAt.IsZero() && (start.IsZero() || a.StartedAt.Before(start)) {
				start = a.StartedAt
			}
		}
		if len(models) > 0 {
			o.Model = strings.Join(models, "+")
		}
		if d.Artifact != nil && d.Artifact.Model != "" {
			o.Model = d.Artifact.Model
		}
		if d.Job.ReviewRecordID != "" {
			rec, err := db.GetReview(ctx, Tenant, d.Job.ReviewRecordID)
			if err != nil {
				return nil, fmt.Errorf("read eval record of job %s: %w", id, err)
			}
			if len(rec.Classification) > 0 && string(rec.Classification) != "null" {
				if err := json.Unmarshal(rec.Classification, &o.Output); err != nil {
					return nil, fmt.Errorf("eval record of job %s: classification is not an object", id)
				}
			}
			if rec.Kind == stet.RecordManual {
				o.FailureClass = rec.FailureClass
			}
			if start.IsZero() {
				start = d.Job.ExtractingAt
			}
			if !start.IsZero() {
				o.RecordMS = max(0, rec.CreatedAt.Sub(start).Milliseconds())
			}
		}
		out[i] = o
	}
	return out, nil
}
