-- Held jobs (waiting or blocked) in ID order, for stet manual: it pages
-- through them after an ID, and without this index every page read and
-- sorted every held job (a million held jobs: a million rows per page of
-- 200). Only held jobs have an entry; a job leaves it when it is claimed,
-- converted or cancelled.
CREATE INDEX jobs_held ON jobs (id) WHERE state IN ('waiting', 'blocked');
