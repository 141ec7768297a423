package bench

import (
	"context"
	"errors"
	"testing"
)

// Run refuses a command line no benchmark can run, before it starts
// anything, with the sentence stetlab bench prints and the benchmark it is
// about; an unknown name is ErrUnknown.
func TestRunRefusesBadCommandLines(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		p     Params
		bench string
		msg   string
	}{
		{"intake", Params{Database: "mysql://x"}, "", "--database must be a postgres:// URL"},
		{"batch", Params{Encrypt: true}, "", "--encrypt is for intake and pipeline"},
		{"provider-limited", Params{WorkerProcesses: 2}, "provider-limited", "--worker-processes above 1 needs --database postgres://…"},
		{"scaling", Params{}, "scaling", "needs --database postgres://…"},
		{"scaling", Params{Database: "postgres://x", Processes: "1,zero"}, "scaling", "--processes must be a list of positive integers"},
	} {
		_, err := Run(context.Background(), tt.name, tt.p)
		var ue *UsageError
		if !errors.As(err, &ue) || ue.Bench != tt.bench || ue.Msg != tt.msg {
			t.Errorf("Run(%s, %+v) = %v, want a UsageError {%q %q}", tt.name, tt.p, err, tt.bench, tt.msg)
		}
	}
	if _, err := Run(context.Background(), "nope", Params{}); !errors.Is(err, ErrUnknown) {
		t.Errorf("Run(nope) = %v, want ErrUnknown", err)
	}
}
