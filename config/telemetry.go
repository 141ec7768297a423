package config

import "net/url"

// Telemetry configures OpenTelemetry traces. Without it (and without the
// standard OTEL_* variables) stet traces nothing.
type Telemetry struct {
	OTLP OTLP `yaml:"otlp"`
}

// Enabled reports whether the config names a collector.
func (t *Telemetry) Enabled() bool { return t.OTLP.Endpoint != "" }

// OTLP is an OTLP/HTTP trace collector: Endpoint is its base URL
// (http://127.0.0.1:4318; traces go to /v1/traces). Insecure must be set
// to send over plain http.
type OTLP struct {
	Endpoint string `yaml:"endpoint"`
	Insecure bool   `yaml:"insecure"`
}

func (l *loader) validateTelemetry(t *Telemetry) {
	if !l.present("telemetry.otlp") {
		if l.present("telemetry") {
			l.problem("telemetry", "needs otlp: {endpoint: URL}")
		}
		return
	}
	p := "telemetry.otlp.endpoint"
	u, err := url.Parse(t.OTLP.Endpoint)
	switch {
	case t.OTLP.Endpoint == "":
		l.problem(p, "required")
	case err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https"):
		l.problem(p, "must be an http or https URL, such as http://127.0.0.1:4318")
	case u.User != nil:
		l.problem(p, "must not hold credentials")
	case u.Scheme == "http" && !t.OTLP.Insecure:
		l.problem(p, "is plain http: set insecure: true to send traces unencrypted, or use https")
	}
}
