package app

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/stetlabs/stet/config"
)

// tracingOn says whether this process exports traces: config telemetry.otlp,
// or the standard OTEL_* variables naming an OTLP exporter or endpoint.
// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn it off.
func tracingOn(cfg *config.Config, getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return false
	case "otlp":
		return true
	}
	return cfg.Telemetry.Enabled() || getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// newTracerProvider returns the process's tracer provider and its shutdown,
// which flushes the spans still buffered. Tracing off: a no-op provider and
// no exporter. The config's endpoint wins over OTEL_EXPORTER_OTLP_*; the
// exporter reads the other OTEL_EXPORTER_OTLP_* variables (headers,
// timeout) itself, and OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES name
// the resource.
func newTracerProvider(ctx context.Context, cfg *config.Config, getenv func(string) string) (trace.TracerProvider, func(context.Context) error, error) {
	if !tracingOn(cfg, getenv) {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	var opts []otlptracehttp.Option
	if cfg.Telemetry.Enabled() {
		// A base URL, like OTEL_EXPORTER_OTLP_ENDPOINT: traces go to
		// /v1/traces under it. config refuses plain http without insecure.
		u, err := url.Parse(cfg.Telemetry.OTLP.Endpoint)
		if err != nil {
			return nil, nil, fmt.Errorf("telemetry.otlp.endpoint: %w", err)
		}
		opts = append(opts, otlptracehttp.WithEndpoint(u.Host),
			otlptracehttp.WithURLPath(strings.TrimSuffix(u.Path, "/")+"/v1/traces"))
		if u.Scheme == "http" {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, nil, err
	}
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", "stet")),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return tp, tp.Shutdown, nil
}
