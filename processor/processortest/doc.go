// Package processortest is the conformance suite every stet processor
// adapter runs: Exercise checks, against the adapter's own wire-faithful
// fake, every guarantee documented on stet.Processor, and ExerciseBatch
// those of stet.BatchProcessor. What every adapter promises is tested here
// once; an adapter's own tests keep only its quirks (request encodings
// against golden files, provider-specific error codes, Azure paths).
//
// # Adopting it
//
// An adapter's test package (package <p>, in <p>_test.go or
// conformance_test.go) calls the suite once per interface. The Harness
// says three things, all provider-agnostic:
//
//   - Start starts a fresh fake for one case (the suite runs cases in
//     parallel, each with its own fake) and returns it as a Fake: its base
//     URL, a call counter, CallsContaining, and Enqueue, which maps one of
//     this package's Fault kinds onto the fake's own scripted fault.
//   - New builds the processor under test pointed at a base URL with a
//     per-call timeout (the suite passes a short one for timeout cases and
//     a dead address for the connection-refused case).
//   - Lacks lists the Fault kinds the provider truly has no concept of, each
//     with the reason (a moderation service has no refusal and no model
//     JSON). Those cases are skipped with the reason in the test log, never
//     silently.
//
// For example, for processor/openai:
//
//	func TestConformance(t *testing.T) {
//		processortest.Exercise(t, processortest.Harness{
//			Start: func(t *testing.T) processortest.Fake {
//				f := openaifake.New(openaifake.Options{APIKey: testKey})
//				t.Cleanup(f.Close)
//				return processortest.Fake{URL: f.URL(), Calls: f.Calls,
//					CallsContaining: f.CallsContaining,
//					Enqueue: func(s processortest.Script) { f.Enqueue(fakeFault(s)) }}
//			},
//			New: func(t *testing.T, url string, timeout time.Duration) stet.Processor {
//				return newClient(t, url, timeout)
//			},
//		})
//	}
//
// where fakeFault maps each Fault kind to the fake's Fault (see the table
// on Fault for what each must answer). ExerciseBatch takes a BatchHarness
// the same way, with a BatchFake that also counts created batches and
// scripts per-item faults; the fake must end a batch, completed, within
// BatchHarness.Polls status lookups.
//
// The suite never touches the network beyond the loopback fakes, never
// sleeps to measure time (timeout cases use the fake's hold), and must never
// be imported by production code.
package processortest
