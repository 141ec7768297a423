-- PostgreSQL's 0017 adds stet_manual_from_held, which converts a page of
-- held jobs for stet manual in one round trip. SQLite runs in process,
-- where a statement costs no round trip, so the conversion sends the
-- statements job by job there and this version changes nothing; it keeps
-- the two dialects' versions in step.
SELECT 1;
