-- Boundary decisions (stet reroute): a blocked job names the processor it
-- was blocked for and the gate's reason code while it is blocked; an
-- operator's decision moves it to another processor the policy in force
-- permits (routed_to, which the extract stage then sends to) and is kept,
-- one row per decision, with the job. Reasons are operators' words, never
-- document text.
ALTER TABLE jobs ADD COLUMN blocked_processor TEXT;
ALTER TABLE jobs ADD COLUMN blocked_reason TEXT;
ALTER TABLE jobs ADD COLUMN routed_to TEXT;

CREATE TABLE boundary_decisions (
    id             INTEGER PRIMARY KEY,
    job_id         INTEGER NOT NULL REFERENCES jobs (id),
    actor          TEXT NOT NULL,
    reason         TEXT NOT NULL,
    from_processor TEXT NOT NULL,
    to_processor   TEXT NOT NULL,
    policy_id      TEXT NOT NULL,
    policy_hash    TEXT NOT NULL,
    decided_at     INTEGER NOT NULL
);
CREATE INDEX boundary_decisions_job ON boundary_decisions (job_id, id);
