-- Deletions read in index order (issue 15: a ledger that keeps growing).
--
-- `stet deletions` lists the newest deletions, of one tenant or of every
-- tenant, and the sweep looks every minute for pending deletions whose
-- worker was lost, oldest first. Without these indexes each read sorted
-- every deletion ever requested: the listing read the tenant's with a
-- sort, or the whole table for every tenant, and the sweep read the whole
-- table. The tenant index gains the ID, the listing's tiebreak, so the
-- newest rows come straight off it.
DROP INDEX deletions_tenant;
CREATE INDEX deletions_tenant ON deletions (tenant_id, requested_at, id);
CREATE INDEX deletions_requested ON deletions (requested_at, id);
CREATE INDEX deletions_pending ON deletions (requested_at) WHERE state = 'pending';
