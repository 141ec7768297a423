// Package processortest is the conformance suite every stet processor
// adapter runs: Exercise checks, against the adapter's own wire-faithful
// fake, every guarantee documented on stet.Processor, and ExerciseBatch
// those of stet.BatchProcessor. What every adapter promises is tested here
// once; an adapter's own tests keep only its quirks (request encodings
// against golden files, provider-specific error codes, Azure paths).
//
// # Adopting it
//
// An adapter's test package (package <p>, in conformance_test.go) calls
// the suite once per interface. The Harness says, all provider-agnostic:
//
//   - Start starts a fresh fake for one case (the suite runs cases in
//     parallel, each with its own fake) and returns it as a Fake: its base
//     URL, a call counter, CallsContaining, and Enqueue, which maps one of
//     this package's Fault kinds onto the fake's own scripted fault.
//     NewFake builds it from the methods every fake has.
//   - Open builds the processor under test from a processor.Common; the
//     suite starts from Harness.Common and sets the base URL, a per-call
//     timeout (a short one for timeout cases, a dead address for the
//     connection-refused case) and, to read the answer, an HTTPClient. It
//     also checks that Open refuses a config without an ID or model, with
//     a relative or non-HTTP base URL or a negative timeout.
//   - Kind, Capabilities, Answer and AuthStatus say what Info reports, what
//     a successful answer carries and the status of a wrong key.
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
//				return processortest.NewFake(f, faults.Script)
//			},
//			Open:         func(c processor.Common) (stet.Processor, error) { return New(Config{Common: c}) },
//			Common:       processor.Common{ID: "openai-test", APIKey: testKey, Model: testModel},
//			Kind:         "openai",
//			Capabilities: []string{"sync", "batch", "json_schema"},
//			Answer:       processortest.Reads{RequestIDHeader: "x-request-id", Model: "model", …}.Answer,
//			AuthStatus:   http.StatusUnauthorized,
//		})
//	}
//
// where faults is a Faults table: the fake's own fault for each Fault kind
// (see the table on Fault for what each must answer); its Script method
// copies a Script's message and retry values into it, and Reads says where
// the answer carries its request ID, model and token counts. ExerciseBatch takes a BatchHarness
// the same way, with a BatchFake that also counts created batches and
// scripts per-item and status-lookup faults; the fake must end a batch,
// completed, within BatchHarness.Polls status lookups.
//
// The package also holds the helpers adapters' own tests share: Golden and
// GoldenJSON (the -update flag is defined here, once), RecordingTransport,
// AsProcessorError, and the table runners of provider-specific rows
// (ClassificationHarness for Extract, BatchStatusHarness for BatchStatus).
//
// The suite never touches the network beyond the loopback fakes, never
// sleeps to measure time (timeout cases use the fake's hold), and must never
// be imported by production code.
package processortest
