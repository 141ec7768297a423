package boundary

import (
	"errors"
	"strings"
	"testing"

	"github.com/stetlabs/stet"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	policy := &stet.Policy{ID: "standard", Processors: []string{"local-rules", "openai-eu"}}
	regional := &stet.Policy{ID: "eu-only", Processors: []string{"local-rules", "openai-eu", "openai-us"}, Regions: []string{"local", "EU"}}
	allowed, empty := []string{"Microsoft"}, []string{}
	restricted := &stet.Policy{ID: "subs", Processors: []string{"openai-eu"}, AllowedSubprocessors: &allowed}
	none := &stet.Policy{ID: "no-subs", Processors: []string{"openai-eu"}, AllowedSubprocessors: &empty}
	tests := []struct {
		name     string
		policy   *stet.Policy
		info     stet.ProcessorInfo
		wantCode string // "" means permitted
	}{
		{"primary", policy, stet.ProcessorInfo{ID: "local-rules", Region: "local"}, ""},
		{"fallback", policy, stet.ProcessorInfo{ID: "openai-eu", Region: "eu"}, ""},
		{"no regions means any region", policy, stet.ProcessorInfo{ID: "openai-eu", Region: "us"}, ""},
		{"not listed", policy, stet.ProcessorInfo{ID: "openai-us", Region: "us"}, CodeProcessorNotPermitted},
		{"empty id", policy, stet.ProcessorInfo{Region: "local"}, CodeProcessorNotPermitted},
		{"case of id matters", policy, stet.ProcessorInfo{ID: "Local-Rules", Region: "local"}, CodeProcessorNotPermitted},
		{"nil policy", nil, stet.ProcessorInfo{ID: "local-rules", Region: "local"}, CodeProcessorNotPermitted},
		{"region permitted", regional, stet.ProcessorInfo{ID: "openai-eu", Region: "eu"}, ""},
		{"region outside", regional, stet.ProcessorInfo{ID: "openai-us", Region: "us"}, CodeRegionNotPermitted},
		{"region undeclared", regional, stet.ProcessorInfo{ID: "openai-eu"}, CodeRegionNotPermitted},
		{"id checked before region", regional, stet.ProcessorInfo{ID: "gemini", Region: "eu"}, CodeProcessorNotPermitted},
		{"subprocessor allowed", restricted, stet.ProcessorInfo{ID: "openai-eu", Region: "eu", Subprocessors: []string{"microsoft"}}, ""},
		{"subprocessor not allowed", restricted, stet.ProcessorInfo{ID: "openai-eu", Region: "eu", Subprocessors: []string{"Microsoft", "Acme"}}, CodeSubprocessorNotPermitted},
		{"no list allows any subprocessor", policy, stet.ProcessorInfo{ID: "openai-eu", Region: "eu", Subprocessors: []string{"Acme"}}, ""},
		{"an empty list allows none", none, stet.ProcessorInfo{ID: "openai-eu", Region: "eu", Subprocessors: []string{"Acme"}}, CodeSubprocessorNotPermitted},
		{"a pending answer", policy, stet.ProcessorInfo{ID: "openai-eu", Region: "eu", Pending: []string{"retention", "deletion"}}, CodePendingPrefix + "retention"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := Check(tt.policy, tt.info)
			if tt.wantCode == "" {
				if err != nil {
					t.Errorf("Check(%v, %q) = %v, want nil", tt.policy, tt.info.ID, err)
				}
				return
			}
			var pe *stet.ProcessorError
			if !errors.As(err, &pe) || pe.Class != stet.FailureBoundary || pe.Code != tt.wantCode {
				t.Fatalf("Check(%v, %q) = %v, want a boundary error with code %s", tt.policy, tt.info.ID, err, tt.wantCode)
			}
			if stet.ClassOf(err) != stet.FailureBoundary {
				t.Errorf("ClassOf(Check(...)) = %s, want boundary", stet.ClassOf(err))
			}
			if !strings.Contains(err.Error(), tt.wantCode) {
				t.Errorf("Check(...).Error() = %q, want it to name %s", err.Error(), tt.wantCode)
			}
		})
	}
}

// A transcriber hears audio only under a policy that says audio: allow and
// lists it; its region, subprocessors and pending answers are judged as a
// processor's; a processor ID is never a transcriber's permission, nor the
// other way round.
func TestCheckTranscriber(t *testing.T) {
	t.Parallel()
	allowed := []string{"Microsoft"}
	audio := &stet.Policy{ID: "audio", Processors: []string{"local-rules"}, Transcribers: []string{"local-audio", "openai-audio"},
		AudioAllowed: true, Regions: []string{"local", "eu"}, AllowedSubprocessors: &allowed}
	listedNotAllowed := &stet.Policy{ID: "no-audio", Processors: []string{"local-rules"}, Transcribers: []string{"local-audio"}}
	tests := []struct {
		name     string
		policy   *stet.Policy
		info     stet.ProcessorInfo
		wantCode string
	}{
		{"primary", audio, stet.ProcessorInfo{ID: "local-audio", Region: "local"}, ""},
		{"fallback in an allowed region", audio, stet.ProcessorInfo{ID: "openai-audio", Region: "EU", Subprocessors: []string{"microsoft"}}, ""},
		{"audio not allowed", listedNotAllowed, stet.ProcessorInfo{ID: "local-audio", Region: "local"}, CodeAudioNotPermitted},
		{"nil policy", nil, stet.ProcessorInfo{ID: "local-audio", Region: "local"}, CodeAudioNotPermitted},
		{"not listed", audio, stet.ProcessorInfo{ID: "other-audio", Region: "local"}, CodeProcessorNotPermitted},
		{"a processor is not a transcriber", audio, stet.ProcessorInfo{ID: "local-rules", Region: "local"}, CodeProcessorNotPermitted},
		{"region outside", audio, stet.ProcessorInfo{ID: "openai-audio", Region: "us"}, CodeRegionNotPermitted},
		{"subprocessor not allowed", audio, stet.ProcessorInfo{ID: "openai-audio", Region: "eu", Subprocessors: []string{"Acme"}}, CodeSubprocessorNotPermitted},
		{"a pending answer", audio, stet.ProcessorInfo{ID: "openai-audio", Region: "eu", Pending: []string{"retention"}}, CodePendingPrefix + "retention"},
	}
	for _, tt := range tests {
		err := CheckTranscriber(tt.policy, tt.info)
		var pe *stet.ProcessorError
		switch {
		case tt.wantCode == "" && err != nil:
			t.Errorf("%s: CheckTranscriber = %v, want nil", tt.name, err)
		case tt.wantCode != "" && (!errors.As(err, &pe) || pe.Class != stet.FailureBoundary || pe.Code != tt.wantCode):
			t.Errorf("%s: CheckTranscriber = %v, want boundary %s", tt.name, err, tt.wantCode)
		}
	}
	if err := Check(audio, stet.ProcessorInfo{ID: "local-audio", Region: "local"}); err == nil {
		t.Errorf("Check of a transcriber ID = nil, want refused: a transcriber never receives text")
	}
}
