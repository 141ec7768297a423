package drill

import (
	"path/filepath"
	"strings"
	"testing"
)

// Options.Check refuses what the flags may not say, in the flags' words.
func TestOptionsCheck(t *testing.T) {
	t.Parallel()
	ok := Options{Reports: 1, Kills: 0, Workers: 1, FaultRate: 0.5}
	if err := ok.Check(); err != nil {
		t.Errorf("Check(%+v) = %v, want nil", ok, err)
	}
	for _, tt := range []struct {
		edit func(*Options)
		want string
	}{
		{func(o *Options) { o.Reports = 0 }, "--reports"},
		{func(o *Options) { o.Kills = -1 }, "--kills"},
		{func(o *Options) { o.Workers = 0 }, "--workers"},
		{func(o *Options) { o.FaultRate = 0.9 }, "--fault-rate"},
		{func(o *Options) { o.FaultRate = -0.1 }, "--fault-rate"},
	} {
		o := ok
		tt.edit(&o)
		if err := o.Check(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Check(%+v) = %v, want an error naming %s", o, err, tt.want)
		}
	}
	if err := CheckPGBin(filepath.Join(t.TempDir(), "none")); err == nil || !strings.Contains(err.Error(), "--pgbin") {
		t.Errorf("CheckPGBin(an empty folder) = %v, want the --pgbin hint", err)
	}
}
