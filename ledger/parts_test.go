package ledger_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"sync"
	"testing"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger"
)

// mergeUnion is a MergeParts for the ledger's tests: the union of the
// parts' objects, manual naming the first part without an artifact.
func mergeUnion(ev string, parts []ledger.PartOutput) (ledger.Merged, error) {
	m := ledger.Merged{Kind: stet.RecordExtracted, Provenance: map[string]stet.FieldSource{}}
	all := map[string]json.RawMessage{}
	for _, p := range parts {
		if p.Output == nil {
			if m.Kind == stet.RecordExtracted {
				m.Kind, m.FailedPart, m.FailureClass = stet.RecordManual, p.PartID, p.FailureClass
			}
			continue
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(p.Output, &obj); err != nil {
			return m, err
		}
		for k, v := range obj {
			all[k] = v
			m.Provenance[k] = stet.FieldSource{Part: p.PartID, Processor: p.Processor, Model: p.Model}
		}
	}
	m.Output, _ = json.Marshal(all)
	return m, nil
}

// startParts fans job out into parts a and b and returns their job IDs.
func startParts(t *testing.T, db *ledger.DB, job string) []string {
	t.Helper()
	var ids []string
	err := db.InTx(context.Background(), func(tx *sql.Tx) error {
		var err error
		ids, err = db.StartParts(context.Background(), tx, job, 0, []ledger.NewPart{
			{PartID: "a", ExtractionVersion: "moderation@1#a"}, {PartID: "b", ExtractionVersion: "moderation@1#b"}}, t0)
		return err
	})
	if err != nil || len(ids) != 2 {
		t.Fatalf("StartParts = %v, %v; want two part jobs", ids, err)
	}
	return ids
}

// savePart claims a part's job and saves its artifact with output.
func savePart(t *testing.T, db *ledger.DB, job, output string) {
	t.Helper()
	tok, n, err := claim(t, db, job, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	err = db.InTx(context.Background(), func(tx *sql.Tx) error {
		return db.SaveArtifact(context.Background(), tx, ledger.SaveArtifactParams{JobID: job, Token: tok, AttemptN: n,
			Raw: []byte(output), Output: []byte(output), SchemaVersion: "moderation@1#x", ProcessorID: "p1", Model: "m1", Now: t0})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Two parts committing at once, on each dialect: of the two
// transactions the one that settles last writes the job's one record,
// merged from both; the first gets PartSettled. Fanning out again is
// refused, and a part committed again answers the same record.
func TestPartsSettleConcurrently(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		db.SetMergeParts(mergeUnion)
		for round := range 5 {
			job := accept(t, db, "p"+string(rune('0'+round)), 1, "text", "d-p"+string(rune('0'+round))).JobID
			parts := startParts(t, db, job)
			err := db.InTx(context.Background(), func(tx *sql.Tx) error {
				_, err := db.StartParts(context.Background(), tx, job, 0, []ledger.NewPart{{PartID: "a", ExtractionVersion: "moderation@1#a"}}, t0)
				return err
			})
			if err != ledger.ErrNotClaimable {
				t.Fatalf("a second fan-out = %v, want ErrNotClaimable", err)
			}
			savePart(t, db, parts[0], `{"category":"none"}`)
			savePart(t, db, parts[1], `{"rationale":"ok"}`)
			got := make([]string, 2)
			var wg sync.WaitGroup
			for i, p := range parts {
				wg.Add(1)
				go func() {
					defer wg.Done()
					err := db.InTx(context.Background(), func(tx *sql.Tx) error {
						var err error
						got[i], err = db.WriteRecord(context.Background(), tx, p, t0)
						return err
					})
					if err != nil {
						t.Errorf("WriteRecord(part %d) = %v", i, err)
					}
				}()
			}
			wg.Wait()
			var rec string
			for _, id := range got {
				if id != ledger.PartSettled {
					if rec != "" {
						t.Fatalf("round %d: both parts wrote a record (%v)", round, got)
					}
					rec = id
				}
			}
			if rec == "" {
				t.Fatalf("round %d: WriteRecord answers %v, want one record ID", round, got)
			}
			if n := count(t, db, `SELECT COUNT(*) FROM review_records WHERE kind = 'extracted' AND provenance LIKE '%"rationale":{"part":"b"%'`); n != round+1 {
				t.Errorf("round %d: merged records with provenance = %d, want %d", round, n, round+1)
			}
			if again := commit(t, db, parts[0]); again != rec {
				t.Errorf("round %d: a part committed again = %s, want the record %s", round, again, rec)
			}
		}
		if n := count(t, db, `SELECT COUNT(*) FROM review_records`); n != 5 {
			t.Errorf("records = %d, want 5 (one per revision, none per part)", n)
		}
	})
}

// A part that fails for good (MarkManual) settles as manual: once the
// other part commits, the job's record is manual, names the failed part
// and keeps the other part's output.
func TestPartManualNamesThePart(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		db.SetMergeParts(mergeUnion)
		job := accept(t, db, "m1", 1, "text", "d-m1").JobID
		parts := startParts(t, db, job)
		tok, _, err := claim(t, db, parts[0], 0, t0)
		if err != nil {
			t.Fatal(err)
		}
		err = db.InTx(context.Background(), func(tx *sql.Tx) error {
			id, err := db.MarkManual(context.Background(), tx, parts[0], tok, stet.FailureRefusal, t0)
			if err == nil && id != ledger.PartSettled {
				t.Errorf("MarkManual of the first part = %s, want PartSettled", id)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		savePart(t, db, parts[1], `{"rationale":"ok"}`)
		rec := commit(t, db, parts[1])
		r, err := db.GetReview(context.Background(), "demo", rec)
		if err != nil {
			t.Fatal(err)
		}
		if r.Kind != stet.RecordManual || r.FailedPart != "a" || r.FailureClass != stet.FailureRefusal || string(r.Classification) != `{"rationale":"ok"}` {
			t.Errorf("record = %s, failed part %q, class %s, %s; want manual naming a, refusal, the other part's output",
				r.Kind, r.FailedPart, r.FailureClass, r.Classification)
		}
		if r.Provenance["rationale"].Part != "b" {
			t.Errorf("provenance = %v, want rationale from part b", r.Provenance)
		}
		d, err := db.GetJob(context.Background(), "demo", job)
		if err != nil {
			t.Fatal(err)
		}
		if d.Job.State != stet.JobManual || len(d.Parts) != 2 || d.Parts[0].State != stet.JobManual || d.Parts[1].State != stet.JobCommitted {
			t.Errorf("job %s with parts %+v, want manual with part a manual and part b committed", d.Job.State, d.Parts)
		}
	})
}
