-- Two indexes every document paid for and no query needs.
--
-- reports_external_id: a report of an external-ID source is found by its
-- identity hash, the SHA-256 of its external ID, which the unique
-- (tenant_id, source_id, identity_hash) key already indexes; the external ID
-- is kept in the row for what the API returns.
DROP INDEX reports_external_id;
-- jobs_report: only a deletion looks jobs up by report, and it goes through
-- the report's revisions ((report_id, revision)) and each revision's jobs
-- ((revision_id, extraction_version)). Report rows are never deleted, so no
-- foreign key check needs it either.
DROP INDEX jobs_report;
