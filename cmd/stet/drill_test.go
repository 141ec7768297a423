package main

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
)

func TestChaosFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want int
	}{
		{[]string{"drill"}, exitUsage},
		{[]string{"drill", "nope"}, exitUsage},
		{[]string{"drill", "chaos", "--reports", "0"}, exitUsage},
		{[]string{"drill", "chaos", "--workers", "0"}, exitUsage},
		{[]string{"drill", "chaos", "--kills", "-1"}, exitUsage},
		{[]string{"drill", "chaos", "--fault-rate", "0.9"}, exitUsage},
		{[]string{"drill", "chaos", "--seed", "forty-two"}, exitUsage},
		{[]string{"drill", "chaos", "extra"}, exitUsage},
		{[]string{"drill", "chaos", "--pgbin", filepath.Join(t.TempDir(), "none")}, exitUnhealthy},
		{[]string{"drill", "help"}, exitOK},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		if got := run(context.Background(), tt.args, &stdout, &stderr); got != tt.want {
			t.Errorf("run(%q) = %d, want %d; stderr %q", tt.args, got, tt.want, stderr.String())
		}
	}
}
