// Package eval is stet eval's engine: it runs every permitted processor
// over a labelled set through exactly the production path (minimization,
// prompt, schema validation, repair budget, failure classes, admission
// limits: the pipeline itself) on a scratch ledger of its own, scores the
// outputs against the labels, and writes report.json and a self-contained
// report.html.
//
// It must never write to the production ledger (it never opens it: the
// audited dispatch pause of --pause-on-fail is cmd/stet's, through
// ledger.SetPause), never send text to a processor the profile's
// policy does not permit, and never put document text, labels or model
// output in a log line or an error: line numbers and IDs only.
package eval
