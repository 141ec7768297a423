-- Whether a stored value is sealed is recorded beside it, never guessed
-- from its form: text, a note or metadata that happens to begin with
-- "stet:v1:" is plaintext like any other. One bit per sealed column:
--   revisions:      text 1, metadata 2
--   artifacts:      raw 1, output 2
--   review_records: classification 1, note 2
ALTER TABLE revisions ADD COLUMN sealed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE artifacts ADD COLUMN sealed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE review_records ADD COLUMN sealed INTEGER NOT NULL DEFAULT 0;

-- The values written sealed before this migration: those in the sealed
-- format under their own report's data key (stet:v1:<data key id>:...), or,
-- for a report whose deletion already destroyed its key, any value in that
-- format. A value a sender forged to look sealed names no data key of its
-- report and stays plaintext.
UPDATE revisions SET sealed =
      (CASE WHEN text IS NOT NULL AND (
            text LIKE (SELECT 'stet:v1:' || k.data_key_id || ':%' FROM report_keys k WHERE k.report_id = revisions.report_id)
         OR (text LIKE 'stet:v1:dk%' AND NOT EXISTS (SELECT 1 FROM report_keys k WHERE k.report_id = revisions.report_id)
             AND EXISTS (SELECT 1 FROM reports r WHERE r.id = revisions.report_id AND r.deleted_at IS NOT NULL)))
       THEN 1 ELSE 0 END)
    + (CASE WHEN metadata IS NOT NULL AND (
            metadata LIKE (SELECT 'stet:v1:' || k.data_key_id || ':%' FROM report_keys k WHERE k.report_id = revisions.report_id)
         OR (metadata LIKE 'stet:v1:dk%' AND NOT EXISTS (SELECT 1 FROM report_keys k WHERE k.report_id = revisions.report_id)
             AND EXISTS (SELECT 1 FROM reports r WHERE r.id = revisions.report_id AND r.deleted_at IS NOT NULL)))
       THEN 2 ELSE 0 END)
WHERE text LIKE 'stet:v1:%' OR metadata LIKE 'stet:v1:%';

UPDATE review_records SET sealed =
      (CASE WHEN classification IS NOT NULL AND (
            classification LIKE (SELECT 'stet:v1:' || k.data_key_id || ':%' FROM report_keys k WHERE k.report_id = review_records.report_id)
         OR (classification LIKE 'stet:v1:dk%' AND NOT EXISTS (SELECT 1 FROM report_keys k WHERE k.report_id = review_records.report_id)
             AND EXISTS (SELECT 1 FROM reports r WHERE r.id = review_records.report_id AND r.deleted_at IS NOT NULL)))
       THEN 1 ELSE 0 END)
    + (CASE WHEN note IS NOT NULL AND (
            note LIKE (SELECT 'stet:v1:' || k.data_key_id || ':%' FROM report_keys k WHERE k.report_id = review_records.report_id)
         OR (note LIKE 'stet:v1:dk%' AND NOT EXISTS (SELECT 1 FROM report_keys k WHERE k.report_id = review_records.report_id)
             AND EXISTS (SELECT 1 FROM reports r WHERE r.id = review_records.report_id AND r.deleted_at IS NOT NULL)))
       THEN 2 ELSE 0 END)
WHERE classification LIKE 'stet:v1:%' OR note LIKE 'stet:v1:%';

UPDATE artifacts SET sealed =
      (CASE WHEN raw IS NOT NULL AND (
            raw LIKE (SELECT 'stet:v1:' || k.data_key_id || ':%' FROM report_keys k JOIN jobs j ON j.report_id = k.report_id WHERE j.id = artifacts.job_id)
         OR (raw LIKE 'stet:v1:dk%' AND NOT EXISTS (SELECT 1 FROM report_keys k JOIN jobs j ON j.report_id = k.report_id WHERE j.id = artifacts.job_id)
             AND EXISTS (SELECT 1 FROM reports r JOIN jobs j ON j.report_id = r.id WHERE j.id = artifacts.job_id AND r.deleted_at IS NOT NULL)))
       THEN 1 ELSE 0 END)
    + (CASE WHEN output IS NOT NULL AND (
            output LIKE (SELECT 'stet:v1:' || k.data_key_id || ':%' FROM report_keys k JOIN jobs j ON j.report_id = k.report_id WHERE j.id = artifacts.job_id)
         OR (output LIKE 'stet:v1:dk%' AND NOT EXISTS (SELECT 1 FROM report_keys k JOIN jobs j ON j.report_id = k.report_id WHERE j.id = artifacts.job_id)
             AND EXISTS (SELECT 1 FROM reports r JOIN jobs j ON j.report_id = r.id WHERE j.id = artifacts.job_id AND r.deleted_at IS NOT NULL)))
       THEN 2 ELSE 0 END)
WHERE raw LIKE 'stet:v1:%' OR output LIKE 'stet:v1:%';
