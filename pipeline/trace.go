package pipeline

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger"
)

// Tracing. Spans carry IDs, names, counts and classes only: never document
// text, a prompt, model output or an external ID. The trace context travels
// from the intake request to every stage job in the job's metadata, as a
// W3C traceparent and nothing else, so one delivery is one trace.

// tracerName names the pipeline's instrumentation scope.
const tracerName = "github.com/stetlabs/stet/pipeline"

// metadataTraceparent is the River job metadata key holding the trace
// context of the span that enqueued the job.
const metadataTraceparent = "traceparent"

// Span attribute keys.
const (
	attrLedgerOp      = attribute.Key("stet.ledger.operation")
	attrDBSystem      = attribute.Key("db.system.name")
	attrJobID         = attribute.Key("stet.job_id")
	attrAttempt       = attribute.Key("stet.attempt")
	attrRepair        = attribute.Key("stet.repair")
	attrProcessorID   = attribute.Key("stet.processor.id")
	attrProcessorKind = attribute.Key("stet.processor.kind")
	attrFailureClass  = attribute.Key("stet.failure_class")
	attrGroupSize     = attribute.Key("stet.intake.group_size")
	attrBatchID       = attribute.Key("stet.batch_id")
	attrRequestModel  = attribute.Key("gen_ai.request.model")
	attrResponseModel = attribute.Key("gen_ai.response.model")
	attrStatusCode    = attribute.Key("http.response.status_code")
	attrInputTokens   = attribute.Key("gen_ai.usage.input_tokens")
	attrOutputTokens  = attribute.Key("gen_ai.usage.output_tokens")
)

// inTx runs fn in one ledger transaction under a span named for op (a
// constant such as "extract.claim"). fn receives the span's context, so
// what it enqueues is parented to the transaction.
func (p *Pipeline) inTx(ctx context.Context, op string, fn func(ctx context.Context, tx *sql.Tx) error, opts ...trace.SpanStartOption) error {
	ctx, span := p.tracer.Start(ctx, "ledger.tx "+op, append(opts,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrLedgerOp.String(op), attrDBSystem.String(p.db.System())))...)
	defer span.End()
	err := p.db.InTx(ctx, func(tx *sql.Tx) error { return fn(ctx, tx) })
	if err != nil {
		// The status says that it failed, not why: an error's text is for
		// the log.
		span.SetStatus(codes.Error, "")
	}
	return err
}

// inStatement runs fn, one statement that commits on its own (or a
// transaction fn runs itself, as intake's pipelined group), against the
// writer pool, under the same span as inTx: on PostgreSQL a single
// statement needs no BEGIN and COMMIT, each a round trip of its own.
func (p *Pipeline) inStatement(ctx context.Context, op string, fn func(ctx context.Context, q ledger.Querier) error, opts ...trace.SpanStartOption) error {
	ctx, span := p.tracer.Start(ctx, "ledger.tx "+op, append(opts, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrLedgerOp.String(op), attrDBSystem.String(p.db.System())))...)
	defer span.End()
	err := fn(ctx, p.db.Writer())
	if err != nil {
		span.SetStatus(codes.Error, "")
	}
	return err
}

// startCall starts the span of one processor call.
func (p *Pipeline) startCall(ctx context.Context, processorID string, proc stet.Processor, jobID string, token int64, repair int) (context.Context, trace.Span) {
	info := proc.Info()
	return p.tracer.Start(ctx, "processor.extract", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attrProcessorID.String(processorID), attrProcessorKind.String(info.Kind), attrRequestModel.String(info.Model),
		attrJobID.String(jobID), attrAttempt.Int64(token), attrRepair.Int(repair)))
}

// endCall records a processor call's outcome on its span and ends it: the
// status code, the failure class and the tokens, never the output.
func endCall(span trace.Span, ext *stet.Extraction, err error) {
	defer span.End()
	status := 0
	if ext != nil {
		status = ext.StatusCode
		span.SetAttributes(attrResponseModel.String(ext.Model),
			attrInputTokens.Int(ext.InputTokens), attrOutputTokens.Int(ext.OutputTokens))
	}
	if err == nil {
		span.SetAttributes(attrStatusCode.Int(status))
		return
	}
	if pe := (*stet.ProcessorError)(nil); errors.As(err, &pe) && pe.StatusCode != 0 {
		status = pe.StatusCode
	}
	span.SetAttributes(attrStatusCode.Int(status), attrFailureClass.String(string(stet.ClassOf(err))))
	span.SetStatus(codes.Error, string(stet.ClassOf(err)))
}

// startBatchCall starts the span of one batch call to a processor: op is
// "submit", "status" or "results".
func (p *Pipeline) startBatchCall(ctx context.Context, op, processorID, batchID string) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{attrProcessorID.String(processorID), attrBatchID.String(batchID)}
	if proc := p.cfg.Processors[processorID]; proc != nil {
		info := proc.Info()
		attrs = append(attrs, attrProcessorKind.String(info.Kind), attrRequestModel.String(info.Model))
	}
	return p.tracer.Start(ctx, "processor.batch_"+op, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

// endBatchCall records a batch call's failure class, if any, and ends its
// span.
func endBatchCall(span trace.Span, err error) {
	defer span.End()
	if err == nil {
		return
	}
	class := string(stet.ClassOf(err))
	if pe := (*stet.ProcessorError)(nil); errors.As(err, &pe) && pe.StatusCode != 0 {
		span.SetAttributes(attrStatusCode.Int(pe.StatusCode))
	}
	span.SetAttributes(attrFailureClass.String(class))
	span.SetStatus(codes.Error, class)
}

// traceparentOf returns the W3C traceparent of ctx's span, or "" if it has
// none.
func traceparentOf(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c[metadataTraceparent]
}

// traceMetadata is River job metadata carrying traceparent alone, or nil.
func traceMetadata(traceparent string) []byte {
	if traceparent == "" {
		return nil
	}
	b, _ := json.Marshal(map[string]string{metadataTraceparent: traceparent})
	return b
}

// traceContext is River middleware that carries the trace through job
// metadata. On insert it stores the inserting span's traceparent on every
// job that has none (intake's group commit sets each delivery's own); on
// work it makes the stored traceparent the parent of everything the job
// does, so a stage job continues its delivery's trace instead of starting
// one. It must come before otelriver's middleware, whose work span then
// has the delivery's span as its parent.
type traceContext struct {
	river.MiddlewareDefaults
}

var (
	_ rivertype.JobInsertMiddleware = (*traceContext)(nil)
	_ rivertype.WorkerMiddleware    = (*traceContext)(nil)
)

func (*traceContext) InsertMany(ctx context.Context, many []*rivertype.JobInsertParams, doInner func(context.Context) ([]*rivertype.JobInsertResult, error)) ([]*rivertype.JobInsertResult, error) {
	if tp := traceparentOf(ctx); tp != "" {
		for _, params := range many {
			params.Metadata = withTraceparent(params.Metadata, tp)
		}
	}
	return doInner(ctx)
}

func (*traceContext) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	var md struct {
		Traceparent string `json:"traceparent"`
	}
	if len(job.Metadata) > 0 && json.Unmarshal(job.Metadata, &md) == nil {
		if sc := trace.SpanContextFromContext(contextWithTraceparent(md.Traceparent)); sc.IsValid() {
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
	}
	return doInner(ctx)
}

// contextWithTraceparent returns a context holding the remote span
// context a traceparent names (none if it is empty or malformed).
func contextWithTraceparent(traceparent string) context.Context {
	ctx := context.Background()
	if traceparent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{metadataTraceparent: traceparent})
}

// withTraceparent adds traceparent to a job's metadata object unless it
// already holds one. Metadata that is not a JSON object is left alone.
func withTraceparent(metadata []byte, traceparent string) []byte {
	m := map[string]json.RawMessage{}
	if len(metadata) > 0 {
		if err := json.Unmarshal(metadata, &m); err != nil {
			return metadata
		}
	}
	if _, ok := m[metadataTraceparent]; ok {
		return metadata
	}
	if m == nil { // metadata was JSON null
		m = map[string]json.RawMessage{}
	}
	v, _ := json.Marshal(traceparent)
	m[metadataTraceparent] = v
	b, err := json.Marshal(m)
	if err != nil {
		return metadata
	}
	return b
}
