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
