package app

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/config"
)

// DeletionRequest reads SOURCE/EXTERNAL_ID against the config's sources;
// a target of neither shape is ErrDeleteTarget, an unknown source not
// found.
func TestDeletionRequest(t *testing.T) {
	t.Parallel()
	a := &App{Config: &config.Config{Sources: []config.Source{{ID: "community-reports", Tenant: "demo"}}}}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	req, err := a.DeletionRequest(context.Background(), "community-reports/report-001", "cli", now)
	if err != nil || req.Tenant != "demo" || req.SourceID != "community-reports" || req.ExternalID != "report-001" || req.Actor != "cli" || !req.Now.Equal(now) {
		t.Errorf("DeletionRequest(SOURCE/EXTERNAL_ID) = %+v, %v", req, err)
	}
	for _, target := range []string{"report-001", "community-reports/", "/report-001"} {
		if _, err := a.DeletionRequest(context.Background(), target, "cli", now); !errors.Is(err, ErrDeleteTarget) {
			t.Errorf("DeletionRequest(%q) = %v, want ErrDeleteTarget", target, err)
		}
	}
	_, err = a.DeletionRequest(context.Background(), "elsewhere/report-001", "cli", now)
	if stet.ErrorCodeOf(err) != stet.ENotFound || stet.ErrorMessageOf(err) != `no source "elsewhere" in the config` {
		t.Errorf("DeletionRequest(unknown source) = %v, want not found", err)
	}
}

// Source finds one configured source, as the intake has it; nil for an ID
// the config lacks.
func TestSource(t *testing.T) {
	t.Parallel()
	cfg, err := config.LoadWithoutSecrets("../../examples/quickstart/stet.yaml", func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	s, err := Source(cfg, "community-reports", stet.SystemClock{})
	if err != nil || s == nil || s.ID != "community-reports" || s.Tenant != cfg.Sources[0].Tenant || s.PolicyHash == "" {
		t.Errorf("Source(community-reports) = %+v, %v", s, err)
	}
	if s, err := Source(cfg, "nope", stet.SystemClock{}); s != nil || err != nil {
		t.Errorf("Source(nope) = %+v, %v; want nil, nil", s, err)
	}
}
