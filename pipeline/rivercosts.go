package pipeline

import "time"

// completedJobRetention is how long River keeps a stage job's row after it
// completed (River's default is 24 hours). Nothing in stet reads a
// completed River row: the ledger is the memo of every stage (attempts,
// artifacts, records), stage jobs are not River-unique, and the one unique
// kind (a deletion's task job) is idempotent in the ledger. What a long
// retention costs is storage: a completed extract row is about 380 bytes
// with its indexes, so a day of rows at 300 documents/s is 26 million rows,
// about 10 GB. Five minutes keeps recent jobs visible to an operator
// looking at River's tables during an incident and bounds the rows kept to
// five minutes of throughput.
const completedJobRetention = 5 * time.Minute

// fetchCooldown bounds River's fetch cooldown (the cooldown is the smaller
// of it and the poll interval). A producer fetches at most its free worker
// slots once per cooldown, so it caps a queue at workers/cooldown jobs/s
// per process: 8 extract workers at 25 ms is 320 jobs/s, far above what
// provider calls of about a second reach. stetlab bench river-drivers
// measures the cap (16 workers: 640-800 jobs/s at 20-25 ms, 1.6-2.3x that
// at 5 ms); a 5 ms cooldown measured no gain in stetlab bench pipeline on
// either dialect (docs/benchmarks.md, River's drivers), so the setting is
// the same for both.
const fetchCooldown = 25 * time.Millisecond

// SideQueuePoll is how often River polls the queues that carry no
// document's first pass: commit (a stage result whose inline commit was
// refused, a resumed job), batch (submission, polling and application of
// provider batches; the periodic assemble, invariants and sweep jobs;
// deletions) and deliver. Their work is rare or paced in seconds, yet at the
// extract queue's interval they were most of an idle process's fetches:
// with a pause holding every document, two of the three fetches every
// 200 ms found nothing. Five times the extract interval, at most a second
// (and never below it): at the 200 ms default a commit job enqueued in a
// transaction starts within a second. Jobs finishing in this process and
// inserts outside a transaction still wake a queue at once.
func SideQueuePoll(extract time.Duration) time.Duration {
	return max(extract, min(5*extract, time.Second))
}
