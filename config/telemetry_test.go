package config

import (
	"path/filepath"
	"testing"
)

func TestTelemetry(t *testing.T) {
	t.Parallel()
	c, err := Load(filepath.Join(writeConfig(t, readExample(t)), "stet.yaml"), lookup(testEnv()))
	if err != nil {
		t.Fatal(err)
	}
	if c.Telemetry.Enabled() {
		t.Fatalf("telemetry without a telemetry: key = %+v, want none", c.Telemetry.OTLP)
	}
	yaml := readExample(t) + "\ntelemetry:\n  otlp: {endpoint: 'http://127.0.0.1:4318', insecure: true}\n"
	c, err = Load(filepath.Join(writeConfig(t, yaml), "stet.yaml"), lookup(testEnv()))
	if err != nil {
		t.Fatal(err)
	}
	if o := c.Telemetry.OTLP; !c.Telemetry.Enabled() || o.Endpoint != "http://127.0.0.1:4318" || !o.Insecure {
		t.Fatalf("telemetry.otlp = %+v, want the endpoint, insecure", o)
	}
}

func TestTelemetryRejects(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, telemetry, wantPath string }{
		{"no endpoint", "telemetry: {otlp: {insecure: true}}", "telemetry.otlp.endpoint"},
		{"not a URL", "telemetry: {otlp: {endpoint: '127.0.0.1:4318'}}", "telemetry.otlp.endpoint"},
		{"plain http, not insecure", "telemetry: {otlp: {endpoint: 'http://collector:4318'}}", "telemetry.otlp.endpoint"},
		{"credentials", "telemetry: {otlp: {endpoint: 'https://u:p@collector:4318'}}", "telemetry.otlp.endpoint"},
		{"no otlp", "telemetry: {}", "telemetry"},
		{"unknown key", "telemetry: {otlp: {endpoint: 'https://collector:4318', headers: x}}", "telemetry.otlp.headers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ps := problems(t, readExample(t)+"\n"+tt.telemetry+"\n", testEnv(), nil)
			found := false
			for _, p := range ps {
				found = found || p.Path == tt.wantPath
			}
			if !found {
				t.Fatalf("problems = %v, want one at %s", ps, tt.wantPath)
			}
		})
	}
}
