-- PostgreSQL's 0013 adds stet_group_retry, with which intake's set-based
-- group stops its own COMMIT. SQLite's intake runs item by item in
-- process, so this version changes nothing; it keeps the two dialects'
-- versions in step.
SELECT 1;
