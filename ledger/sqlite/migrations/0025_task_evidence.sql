-- An operator's confirmation that a copy stet could not delete itself is
-- gone (stet deletions confirm): who confirmed it and the evidence they
-- gave, kept on the task beside its reason. Evidence is a provider's
-- ticket or reference, never document text; it is shown with the task and
-- never logged or audited.
ALTER TABLE deletion_tasks ADD COLUMN confirmed_by TEXT;
ALTER TABLE deletion_tasks ADD COLUMN evidence TEXT;
