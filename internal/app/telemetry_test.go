package app

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/stetlabs/stet/config"
)

func TestTracingOffWithoutConfig(t *testing.T) {
	t.Parallel()
	on := &config.Config{Telemetry: config.Telemetry{OTLP: config.OTLP{Endpoint: "http://127.0.0.1:4318", Insecure: true}}}
	tests := []struct {
		name string
		cfg  *config.Config
		env  map[string]string
		want bool
	}{
		{"no config, no variables", &config.Config{}, nil, false},
		{"unrelated OTEL variable", &config.Config{}, map[string]string{"OTEL_SERVICE_NAME": "stet-a"}, false},
		{"config", on, nil, true},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", &config.Config{}, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, true},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &config.Config{}, map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, true},
		{"OTEL_TRACES_EXPORTER=otlp", &config.Config{}, map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{"OTEL_TRACES_EXPORTER=none beats config", on, map[string]string{"OTEL_TRACES_EXPORTER": "none"}, false},
		{"OTEL_SDK_DISABLED beats config", on, map[string]string{"OTEL_SDK_DISABLED": "true"}, false},
	}
	for _, tt := range tests {
		getenv := func(k string) string { return tt.env[k] }
		if got := tracingOn(tt.cfg, getenv); got != tt.want {
			t.Errorf("%s: tracingOn = %v, want %v", tt.name, got, tt.want)
		}
		tp, stop, err := newTracerProvider(t.Context(), tt.cfg, getenv)
		if err != nil {
			t.Fatalf("%s: newTracerProvider: %v", tt.name, err)
		}
		_, isNoop := tp.(noop.TracerProvider)
		_, isSDK := tp.(*sdktrace.TracerProvider)
		if isNoop == tt.want || isSDK != tt.want {
			t.Errorf("%s: provider %T, want an exporting one: %v", tt.name, tp, tt.want)
		}
		_ = stop(context.Background())
	}
}

// TestTracingExportsToConfiguredCollector sends a span to a collector
// named by telemetry.otlp and sees it arrive at /v1/traces on shutdown.
func TestTracingExportsToConfiguredCollector(t *testing.T) {
	t.Parallel()
	var posts atomic.Int32
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" && r.Header.Get("Content-Type") == "application/x-protobuf" {
			posts.Add(1)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	cfg := &config.Config{Telemetry: config.Telemetry{OTLP: config.OTLP{Endpoint: collector.URL, Insecure: true}}}
	tp, stop, err := newTracerProvider(t.Context(), cfg, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer("test").Start(t.Context(), "ledger.tx test")
	span.End()
	if err := stop(t.Context()); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if n := posts.Load(); n != 1 {
		t.Fatalf("collector received %d trace exports, want 1", n)
	}
}
