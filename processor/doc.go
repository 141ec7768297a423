// Package processor holds what every provider adapter under processor/
// shares, written once: reading Retry-After and capping it, the repair
// message sent after invalid output, the filter that keeps a provider's
// error code only when it is a machine identifier, and the schema name
// providers accept. The guarantees adapters give are documented on
// stet.Processor and stet.BatchProcessor and checked by
// processor/processortest.
//
// It imports only the standard library and the stet domain package. It must
// never hold provider-specific rules (those live in the adapter's
// classify.go) and its helpers must never copy document text, prompts or
// model output into what they return.
package processor
