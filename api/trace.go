package api

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// traced wraps a route's handler in a server span named by the route
// pattern ("GET /v1/sources/{source}/reports/{external_id}"), never the
// concrete path, which may hold an external ID: url.path is overwritten
// with the pattern's path too. A caller's W3C traceparent is continued.
// otelhttp's metrics go nowhere: /metrics is stet's Prometheus registry.
//
// With tracing off (no provider, or the no-op one) there is no span to
// make: the handler only carries a caller's traceparent into the request's
// context, which is all otelhttp's no-op span would give (intake stores it
// on the delivery's extract job, whose worker may trace). That skips
// otelhttp's per-request work, about 14 µs a delivery on the intake
// benchmark's profile.
func (s *Server) traced(pattern string, h http.Handler) http.Handler {
	tp := s.cfg.TracerProvider
	if _, off := tp.(tracenoop.TracerProvider); off || tp == nil {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("traceparent") == "" {
				h.ServeHTTP(w, r)
				return
			}
			h.ServeHTTP(w, r.WithContext(propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))))
		})
	}
	route := pattern
	if i := strings.IndexByte(pattern, '/'); i >= 0 {
		route = pattern[i:]
	}
	return otelhttp.NewHandler(h, pattern,
		otelhttp.WithTracerProvider(tp),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelhttp.WithPropagators(propagation.TraceContext{}),
		otelhttp.WithSpanNameFormatter(func(operation string, _ *http.Request) string { return operation }),
		// Start attributes apply in order and a later value of a key
		// replaces an earlier one: this replaces otelhttp's url.path.
		otelhttp.WithSpanOptions(trace.WithAttributes(attribute.String("url.path", route))),
	)
}
