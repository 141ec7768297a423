-- PostgreSQL's 0012 adds stet_save_result, one round trip for a stage
-- result. SQLite runs in process, where a statement costs no round trip,
-- so the extract stage sends the statements one by one there and this
-- version changes nothing; it keeps the two dialects' versions in step.
SELECT 1;
