-- PostgreSQL's 0014 adds stet_save_result_commit, with which the extract
-- stage sends a stage result and its COMMIT in one round trip. SQLite's
-- stage results are group-committed in process, so this version changes
-- nothing; it keeps the two dialects' versions in step.
SELECT 1;
