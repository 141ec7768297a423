-- Parts (docs/design.md §16): a profile with parts extracts each part in
-- a job of its own, under the revision's job (parent_job_id), named by its
-- part ID. The revision's job writes the one review record once every part
-- has settled. A manual record names the part that failed for good
-- (failed_part); a record of a profile with parts says, field by field,
-- which part, processor and model produced it (provenance: JSON of IDs and
-- model names, never document text).
ALTER TABLE jobs ADD COLUMN parent_job_id INTEGER REFERENCES jobs (id);
ALTER TABLE jobs ADD COLUMN part_id TEXT;
CREATE INDEX jobs_parent ON jobs (parent_job_id) WHERE parent_job_id IS NOT NULL;
ALTER TABLE review_records ADD COLUMN failed_part TEXT;
ALTER TABLE review_records ADD COLUMN provenance TEXT;
