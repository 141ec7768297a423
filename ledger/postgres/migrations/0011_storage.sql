-- Fewer bytes per document (issue 15, storage).
--
-- revisions_report (report_id) is a prefix of the unique index on
-- (report_id, revision), which serves every lookup by report.
DROP INDEX revisions_report;
