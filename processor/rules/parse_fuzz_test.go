package rules

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// fileErrors are the parse errors about the file as a whole, which have no
// line to name.
var fileErrors = regexp.MustCompile(`^(empty file|missing key "[a-z_]+"|labels_field and rationale_field name the same property|yaml: .*)$`)

// FuzzParse: parse never panics, and every error names a line (or is about
// the whole file). There is no serializer, so nothing is re-parsed.
func FuzzParse(f *testing.F) {
	if b, err := os.ReadFile("../../config/testdata/valid/profiles/moderation.rules.yaml"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("version: 1\ndefaults: {}\nrules:\n  - id: a\n    any: [x]\n    set: {k: v}\n"))
	f.Add([]byte("version: 1\ndefaults: {}\nterms:\n  t: [a, b]\nrules:\n  - id: a\n    regex: ['${t}']\n    set: {k: 1}\n"))
	f.Add([]byte("version: 1\ndefaults: {}\nrules:\n  - id: a\n    regex: ['${missing}']\n    set: {k: 1}\n"))
	f.Add([]byte("version: 2\n"))
	f.Add([]byte("version: 1\ndefaults: &d {a: *d}\nrules: []\n"))
	f.Add([]byte("- a\n- b\n"))
	f.Add([]byte(""))
	f.Add([]byte("version: 1\nversion: 1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := parse(data)
		if err == nil {
			return
		}
		msg := err.Error()
		if !strings.Contains(msg, "line ") && !fileErrors.MatchString(msg) {
			t.Fatalf("parse(%q) = %q: names no line", data, msg)
		}
	})
}
