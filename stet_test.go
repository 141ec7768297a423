package stet_test

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet"
)

func TestTextNeverPrints(t *testing.T) {
	t.Parallel()
	const secret = "Patient Jane Roe, MRN 12345, CANARYtext"
	txt := stet.NewText(secret)
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("x", "text", txt)
	for _, s := range []string{fmt.Sprint(txt), fmt.Sprintf("%v %+v %#v %s", txt, txt, txt, txt), logs.String(), fmt.Errorf("wrap: %v", txt).Error()} {
		if strings.Contains(s, "CANARY") {
			t.Errorf("text leaked: %s", s)
		}
	}
	if _, err := json.Marshal(struct{ T stet.Text }{txt}); err == nil {
		t.Error("json.Marshal of a Text succeeded, want an error")
	}
	if txt.Reveal() != secret || txt.Len() != len(secret) {
		t.Error("Reveal/Len do not return the text")
	}
}

func TestNewIDOrdered(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	var ids []string
	for i := 0; i < 1000; i++ {
		ids = append(ids, stet.NewID("job", now.Add(time.Duration(i/10)*time.Millisecond)))
	}
	if !sort.StringsAreSorted(ids) {
		t.Error("IDs made in order do not sort in order")
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] || !strings.HasPrefix(id, "job_") || len(id) != 30 {
			t.Fatalf("bad or duplicate ID %q", id)
		}
		seen[id] = true
	}
}

func TestRoleAllows(t *testing.T) {
	t.Parallel()
	tests := []struct {
		have, need stet.Role
		want       bool
	}{
		{stet.RoleReader, stet.RoleReader, true},
		{stet.RoleReader, stet.RoleReviewer, false},
		{stet.RoleReviewer, stet.RoleReader, true},
		{stet.RoleOperator, stet.RoleReviewer, true},
		{stet.Role("admin"), stet.RoleReader, false},
	}
	for _, tt := range tests {
		if got := tt.have.Allows(tt.need); got != tt.want {
			t.Errorf("Role(%q).Allows(%q) = %v, want %v", tt.have, tt.need, got, tt.want)
		}
	}
}

// Dependencies point inward (docs/design.md §2): the domain package imports only the
// standard library; processor packages import their SDK and never each
// other; only cmd/stet imports everything.
func TestDependencyDirection(t *testing.T) {
	t.Parallel()
	deps := func(pkg string) []string {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		return strings.Fields(string(out))
	}
	const mod = "github.com/stetlabs/stet"
	for _, d := range deps(mod) {
		if d != mod {
			t.Errorf("package stet imports %s; it may import only the standard library", d)
		}
	}
	out, err := exec.Command("go", "list", "./processor/...").Output()
	if err != nil {
		t.Fatalf("go list ./processor/...: %v", err)
	}
	procs := strings.Fields(string(out))
	if len(procs) < 2 {
		t.Fatalf("processor packages = %v, want at least rules and openai", procs)
	}
	// The one shared piece: lab/fakekit, the fakes' common code, which
	// itself imports only the standard library.
	const kit = mod + "/lab/fakekit"
	for _, d := range deps(kit) {
		if d != kit {
			t.Errorf("lab/fakekit imports %s; it may import only the standard library", d)
		}
	}
	// processor is what adapters share; processortest is their conformance
	// suite; processor/<p> an adapter; processor/<p>/<p>fake its fake.
	const shared, suite = mod + "/processor", mod + "/processor/processortest"
	// yamlcheck reads the hand-written YAML files of the two local
	// processors, a rules file and an Azure Content Safety mapping, with
	// the same strictness and line-numbered errors; only those two may
	// import it, and it imports only stet, the standard library and the
	// YAML decoder.
	const yamlcheck, yamlDecoder = mod + "/processor/yamlcheck", "go.yaml.in/yaml/v3"
	mayUseYAMLCheck := map[string]bool{mod + "/processor/rules": true, mod + "/processor/azurecs": true}
	// processor/transcribe is the transcribers' seam, as processor is the
	// processors': it imports only stet; transcribetest is their suite;
	// processor/transcribe/<t> an offline transcriber, and a provider's
	// adapter may implement a transcriber beside its processor.
	const tseam, tsuite = mod + "/processor/transcribe", mod + "/processor/transcribe/transcribetest"
	for _, p := range procs {
		isFake := isFakePackage(p)
		isTranscriber := strings.HasPrefix(p, tseam+"/") && p != tsuite
		for _, d := range deps(p) {
			switch {
			case d == p || d == mod:
			case p == shared || p == tseam:
				t.Errorf("%s imports %s; it may import only stet and the standard library", p, d)
			case p == tsuite:
				if d != tseam {
					t.Errorf("%s imports %s; the suite imports only stet and processor/transcribe", p, d)
				}
			case isTranscriber:
				if strings.HasPrefix(d, mod+"/") && d != shared && d != tseam {
					t.Errorf("%s imports %s; a transcriber imports only stet, processor, processor/transcribe and its SDK", p, d)
				}
			case p == yamlcheck:
				if d != yamlDecoder {
					t.Errorf("%s imports %s; it may import only stet, the standard library and the YAML decoder", p, d)
				}
			case d == yamlcheck && mayUseYAMLCheck[p]:
			case p == suite:
				if d != shared {
					t.Errorf("%s imports %s; the suite imports only stet and processor", p, d)
				}
			case isFake:
				// A fake speaks the wire itself: no SDK, no adapter.
				if d != kit {
					t.Errorf("%s imports %s; a fake imports only stet and lab/fakekit", p, d)
				}
			case strings.HasPrefix(d, mod+"/") && d != shared && d != tseam:
				t.Errorf("%s imports %s; a processor imports only stet, processor, processor/transcribe and its SDK", p, d)
			}
		}
	}
	// The product binary links no lab: no package of lab/, no provider
	// fake, no processortest; and no package of stet's imports testing or
	// net/http/httptest. The lab is cmd/stetlab.
	type pkgInfo struct {
		ImportPath string
		Imports    []string
		Standard   bool
	}
	list := func(pattern string, deps bool) []pkgInfo {
		args := []string{"list", "-json=ImportPath,Imports,Standard"}
		if deps {
			args = append(args, "-deps")
		}
		out, err := exec.Command("go", append(args, pattern)...).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pattern, err)
		}
		var ps []pkgInfo
		for dec := json.NewDecoder(bytes.NewReader(out)); dec.More(); {
			var p pkgInfo
			if err := dec.Decode(&p); err != nil {
				t.Fatalf("go list %s: %v", pattern, err)
			}
			ps = append(ps, p)
		}
		return ps
	}
	isLab := func(p string) bool {
		return strings.HasPrefix(p, mod+"/lab/") || isFakePackage(p) || p == mod+"/processor/processortest" || p == mod+"/processor/transcribe/transcribetest" || p == mod+"/cmd/stetlab"
	}
	for _, p := range list(mod+"/cmd/stet", true) {
		if isLab(p.ImportPath) {
			t.Errorf("the stet binary links %s; the lab is cmd/stetlab's", p.ImportPath)
		}
		for _, d := range p.Imports {
			if d != "testing" && d != "net/http/httptest" {
				continue
			}
			// Google's Gemini SDK ships its replay test client in non-test
			// files (replay_api_client.go); it is the one way in, and
			// docs/design.md §2 says so.
			if p.ImportPath != "google.golang.org/genai" {
				t.Errorf("%s imports %s and the stet binary links it", p.ImportPath, d)
			}
		}
	}
	// No production package imports testing or a fake: only the lab, the
	// conformance suites and the fakes themselves may.
	for _, p := range list("./...", false) {
		if isLab(p.ImportPath) || strings.HasSuffix(p.ImportPath, "test") {
			continue
		}
		for _, d := range p.Imports {
			if d == "testing" || d == "net/http/httptest" || isLab(d) {
				t.Errorf("%s imports %s; only the lab and the test suites may", p.ImportPath, d)
			}
		}
	}
	for _, p := range []string{"ledger", "boundary", "schema", "config", "api", "pipeline", "metrics"} {
		for _, d := range deps(mod + "/" + p) {
			// processor/transcribe is a seam (the Transcriber interface and
			// the accepted audio types), as package stet is for processors.
			if strings.HasPrefix(d, mod+"/cmd") || (strings.HasPrefix(d, mod+"/processor/") && d != tseam) {
				t.Errorf("%s imports %s; only cmd/stet and internal/app wire processors", p, d)
			}
		}
	}
	// seal and webhook are leaves: the standard library and stet only. The
	// ledger seals with seal and never reaches the boundary package;
	// outbound signs with webhook and never reaches api or the pipeline;
	// governance, monitor and outbound run beside the stages, never inside
	// them.
	for _, p := range []string{"seal", "webhook"} {
		for _, d := range deps(mod + "/" + p) {
			if d != mod && d != mod+"/"+p {
				t.Errorf("%s imports %s; it may import only stet and the standard library", p, d)
			}
		}
	}
	// The ledger's drivers know their database and nothing of stet, and
	// only the ledger opens them: no caller ever asks which it has.
	for _, p := range []string{"ledger/sqlite", "ledger/postgres"} {
		for _, d := range deps(mod + "/" + p) {
			if d != mod+"/"+p && strings.HasPrefix(d, mod) {
				t.Errorf("%s imports %s; a driver imports only its database's library", p, d)
			}
		}
	}
	for _, p := range list("./...", false) {
		if p.ImportPath == mod+"/ledger" || strings.HasPrefix(p.ImportPath, mod+"/ledger/") {
			continue
		}
		for _, d := range p.Imports {
			if d == mod+"/ledger/sqlite" || d == mod+"/ledger/postgres" {
				t.Errorf("%s imports the ledger driver %s; only the ledger does", p.ImportPath, d)
			}
		}
	}
	for p, banned := range map[string][]string{"ledger": {"boundary"}, "outbound": {"api", "pipeline"}, "governance": {"api", "pipeline"}, "monitor": {"api", "pipeline"}} {
		for _, d := range deps(mod + "/" + p) {
			for _, b := range banned {
				if d == mod+"/"+b {
					t.Errorf("%s imports %s", p, d)
				}
			}
		}
	}
	// Tracing stays out of the ledger (pipeline names its transactions),
	// and only internal/app builds an exporter or the SDK.
	for _, p := range []string{"ledger", "boundary", "schema", "config", "metrics"} {
		for _, d := range deps(mod + "/" + p) {
			if strings.HasPrefix(d, "go.opentelemetry.io/") {
				t.Errorf("%s imports %s; tracing belongs to pipeline and api", p, d)
			}
		}
	}
	for _, p := range []string{"api", "pipeline"} {
		for _, d := range deps(mod + "/" + p) {
			if strings.HasPrefix(d, "go.opentelemetry.io/otel/sdk") || strings.HasPrefix(d, "go.opentelemetry.io/otel/exporters") {
				t.Errorf("%s imports %s; only internal/app builds the tracer provider", p, d)
			}
		}
	}
}

// isFakePackage reports whether pkg is a provider fake,
// processor/<p>/<p>fake.
func isFakePackage(pkg string) bool {
	rest, ok := strings.CutPrefix(pkg, "github.com/stetlabs/stet/processor/")
	if !ok {
		return false
	}
	p, fake, ok := strings.Cut(rest, "/")
	return ok && fake == p+"fake"
}

// ParseID is FormatID's inverse, and refuses what NewID cannot make.
func TestParseIDRoundTrip(t *testing.T) {
	t.Parallel()
	// Random bytes, not NewID: NewID's order within a millisecond is
	// process-wide state that TestNewIDOrdered checks in parallel.
	for i := 0; i < 100; i++ {
		var raw [16]byte
		if _, err := rand.Read(raw[:]); err != nil {
			t.Fatal(err)
		}
		id := stet.FormatID("job", raw)
		prefix, b, ok := stet.ParseID(id)
		if !ok || prefix != "job" || b != raw || stet.FormatID(prefix, b) != id {
			t.Fatalf("ParseID(%q) = %q, %x, %v; want it back", id, prefix, b, ok)
		}
	}
	for _, bad := range []string{"", "job", "job_", "job_01M8Z4DWBDGGWVCJ34ZGW7NE5", "job_01M8Z4DWBDGGWVCJ34ZGW7NE5PX",
		"job_81M8Z4DWBDGGWVCJ34ZGW7NE5P", "job_01M8Z4DWBDGGWVCJ34ZGW7NE5U", "job_01m8z4dwbdggwvcj34zgw7ne5p"} {
		if _, _, ok := stet.ParseID(bad); ok {
			t.Errorf("ParseID(%q) ok, want refused", bad)
		}
	}
}
