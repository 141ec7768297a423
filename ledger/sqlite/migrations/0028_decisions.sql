-- Decisions are rows (docs/design.md §17): every decision on a review
-- record is kept, oldest first, with the classification it decided (an
-- override's own; otherwise the record's then), the reviewer's note, who
-- and when. The record's own decision columns hold the latest; a reopened
-- record is pending again and keeps its rows. Classification and note are
-- sealed like the record's, bound to the record's ID (sealed: bit 1 the
-- classification, bit 2 the note), and go with the record's retention and
-- deletion (report_id finds a report's rows).
CREATE TABLE decisions (
    id             INTEGER PRIMARY KEY,
    record_id      INTEGER NOT NULL REFERENCES review_records (id),
    report_id      INTEGER NOT NULL REFERENCES reports (id),
    decision       TEXT NOT NULL,
    classification TEXT,
    note           TEXT,
    actor          TEXT NOT NULL,
    decided_at     INTEGER NOT NULL,
    sealed         INTEGER NOT NULL DEFAULT 0,
    purged_at      INTEGER
);
CREATE INDEX decisions_record ON decisions (record_id, id);
CREATE INDEX decisions_report ON decisions (report_id);

INSERT INTO decisions (record_id, report_id, decision, classification, note, actor, decided_at, sealed, purged_at)
SELECT id, report_id, decision, classification, note, COALESCE(decided_by, ''), decided_at, sealed & 3, classification_purged_at
FROM review_records WHERE state = 'decided' AND decision IS NOT NULL AND decided_at IS NOT NULL ORDER BY id;

-- The reopens of a record, counted: each reopen and the decision after it
-- are events of their own to destinations (their webhook-ids carry it).
ALTER TABLE review_records ADD COLUMN reopens INTEGER NOT NULL DEFAULT 0;
