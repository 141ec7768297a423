package pipeline

// Parts (docs/design.md §16). A profile with parts never goes to a
// processor itself: its job, the parent, is fanned out into one job per
// part (fanOut, or fanOutBatch for batch mode), and each part's job runs
// the stage machine like any job, asking its own processors for its
// fields' sub-schema. The ledger settles the parent when the last part
// settles, with mergeParts below.

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/riverqueue/river"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger"
)

// newParts are the part jobs to create under a job of profile.
func newParts(profile *Profile) []ledger.NewPart {
	parts := make([]ledger.NewPart, len(profile.Parts))
	for i, pp := range profile.Parts {
		parts[i] = ledger.NewPart{PartID: pp.Part, ExtractionVersion: pp.ExtractionVersion()}
	}
	return parts
}

// fanOut fans a synchronous job of a profile with parts out into its
// parts' jobs and enqueues them, in one transaction with the River job's
// completion: a crash leaves the job either whole or fanned out.
func (p *Pipeline) fanOut(ctx context.Context, job *river.Job[ExtractArgs], j *stet.Job, profile *Profile) (string, error) {
	err := p.inTx(ctx, "extract.fan_out", func(ctx context.Context, tx *sql.Tx) error {
		ids, err := p.db.StartParts(ctx, tx, j.ID, j.Attempt, newParts(profile), p.clock.Now())
		if err != nil {
			return err
		}
		inserts := make([]river.InsertManyParams, len(ids))
		for i, id := range ids {
			inserts[i] = river.InsertManyParams{Args: ExtractArgs{JobID: id}}
		}
		if len(inserts) > 0 {
			if _, err := p.river.InsertManyTx(ctx, tx, inserts); err != nil {
				return err
			}
		}
		return completeTx(ctx, tx, job)
	})
	if errors.Is(err, ledger.ErrNotClaimable) {
		return "noop", nil // fanned out or cancelled since it was read
	}
	if err != nil {
		return "error", fmt.Errorf("fan out job %s: %w", j.ID, err)
	}
	return "fanned_out", nil
}

// fanOutBatch fans batch-mode jobs of profiles with parts out into their
// parts' jobs, which stay in batch mode: the assembler batches them by
// their own processors on its next read.
func (p *Pipeline) fanOutBatch(ctx context.Context, parents []ledger.PendingJob) error {
	return p.inTx(ctx, "batch.fan_out", func(ctx context.Context, tx *sql.Tx) error {
		for _, j := range parents {
			_, err := p.db.StartParts(ctx, tx, j.ID, j.Attempt, newParts(p.profiles[j.ExtractionVersion]), p.clock.Now())
			if err != nil && !errors.Is(err, ledger.ErrNotClaimable) {
				return err
			}
		}
		return nil
	})
}

// mergeParts is the ledger's ledger.MergeParts: it merges the settled
// parts of a job of extraction version ev into one object, each part
// giving its own fields, and says where each field came from. A part that
// settled without an artifact makes the record manual, naming the first
// such part in config order; so does a merged object the whole schema
// refuses (invalid_output, no part named).
func (p *Pipeline) mergeParts(ev string, parts []ledger.PartOutput) (ledger.Merged, error) {
	profile := p.profiles[ev]
	if profile == nil || len(profile.Parts) == 0 {
		return ledger.Merged{}, fmt.Errorf("extraction version %s: no profile with parts in this process", ev)
	}
	byPart := make(map[string]ledger.PartOutput, len(parts))
	for _, o := range parts {
		byPart[o.PartID] = o
	}
	m := ledger.Merged{Kind: stet.RecordExtracted, Provenance: map[string]stet.FieldSource{}}
	fields := map[string]json.RawMessage{}
	for _, pp := range profile.Parts {
		o, ok := byPart[pp.Part]
		if !ok || o.Output == nil || o.State != stet.JobCommitted {
			if m.Kind != stet.RecordManual {
				m.Kind, m.FailedPart, m.FailureClass = stet.RecordManual, pp.Part, o.FailureClass
				if m.FailureClass == "" {
					m.FailureClass = stet.FailureInvalidOutput
				}
			}
			continue
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(o.Output, &obj); err != nil {
			return ledger.Merged{}, fmt.Errorf("part %s: output is not an object", pp.Part)
		}
		for _, f := range pp.fields {
			if v, ok := obj[f]; ok {
				fields[f] = v
				m.Provenance[f] = stet.FieldSource{Part: pp.Part, Processor: o.Processor, Model: o.Model}
			}
		}
	}
	out, err := mergedObject(profile, fields)
	if err != nil {
		return ledger.Merged{}, err
	}
	if len(fields) > 0 {
		m.Output = out
	}
	if m.Kind == stet.RecordExtracted {
		if problems := profile.Validator.Validate(out); len(problems) > 0 {
			m.Kind, m.FailureClass = stet.RecordManual, stet.FailureInvalidOutput
		}
	}
	return m, nil
}

// mergedObject writes fields as one JSON object in the order the
// profile's schema lists its properties.
func mergedObject(profile *Profile, fields map[string]json.RawMessage) (json.RawMessage, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	n := 0
	for _, f := range profile.fields {
		v, ok := fields[f]
		if !ok {
			continue
		}
		if n > 0 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(f)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
		n++
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}
