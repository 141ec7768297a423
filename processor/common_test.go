package processor

import (
	"reflect"
	"testing"
	"time"

	"github.com/stetlabs/stet"
)

func TestCommonCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		c    Common
		want string
	}{
		{Common{ID: "x"}, ""},
		{Common{}, "openai: config: id is required"},
		{Common{ID: "x", Timeout: -time.Second}, "openai: config x: timeout must not be negative"},
	}
	for _, tt := range tests {
		err := tt.c.Check("openai")
		if got := errText(err); got != tt.want {
			t.Errorf("Check(%+v) = %q, want %q", tt.c, got, tt.want)
		}
	}
}

func TestCommonCheckModel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		c    Common
		want string
	}{
		{Common{ID: "x", Model: "m"}, ""},
		{Common{ID: "x"}, "infrai: config x: model is required"},
		{Common{Model: "m"}, "infrai: config: id is required"},
		{Common{ID: "x", Model: "m", Timeout: -time.Second}, "infrai: config x: timeout must not be negative"},
	}
	for _, tt := range tests {
		if got := errText(tt.c.CheckModel("infrai")); got != tt.want {
			t.Errorf("CheckModel(%+v) = %q, want %q", tt.c, got, tt.want)
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestCommonTimeoutOr(t *testing.T) {
	t.Parallel()
	if got := (Common{}).TimeoutOr(time.Minute); got != time.Minute {
		t.Errorf("TimeoutOr with no timeout = %v, want 1m", got)
	}
	if got := (Common{Timeout: time.Second}).TimeoutOr(time.Minute); got != time.Second {
		t.Errorf("TimeoutOr with 1s = %v, want 1s", got)
	}
}

func TestCommonInfo(t *testing.T) {
	t.Parallel()
	subs := []string{"Microsoft"}
	c := Common{ID: "p", BaseURL: "https://x", APIKey: "secret", Model: "m", Region: "eu", Retention: "30d", ZeroRetention: true, Subprocessors: subs}
	got := c.Info("openai")
	want := stet.ProcessorInfo{ID: "p", Kind: "openai", Model: "m", Region: "eu", Retention: "30d", ZeroRetention: true,
		Subprocessors: []string{"Microsoft"}, SendsTextOffHost: true}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Info = %+v, want %+v", got, want)
	}
	subs[0] = "changed"
	if got.Subprocessors[0] != "Microsoft" {
		t.Errorf("Info shares Subprocessors with the Common it came from")
	}
	got.Capabilities = []string{"sync"}
	cp := CopyInfo(got)
	cp.Subprocessors[0], cp.Capabilities[0] = "x", "x"
	if got.Subprocessors[0] != "Microsoft" || got.Capabilities[0] != "sync" {
		t.Errorf("CopyInfo shares slices with its argument")
	}
}
