package config

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLoad: Load never panics on arbitrary YAML, and every problem names a
// key path or a line; only a file that is not YAML, or not one document,
// may name neither. A problem from decoding after the shape check means the
// check missed a wrong type.
func FuzzLoad(f *testing.F) {
	example, err := os.ReadFile(filepath.Join("testdata", "valid", "stet.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
	f.Add(bytes.Replace(example, []byte("identity: external_id"), []byte("identity: [1, 2]"), 1))
	f.Add(bytes.Replace(example, []byte("sources:"), []byte("sources: 7\nx:"), 1))
	f.Add(bytes.Replace(example, []byte("sqlite://stet-data/stet.db"), []byte("'postgres://u:p@127.0.0.1,db.example.org:5/d?sslmode=verify-full&ssl=true&host=h'"), 1))
	f.Add([]byte("database: 3\nlisten: {a: b}\ntenants: [1]\n"))
	f.Add([]byte("a: &x [*x]\n"))
	f.Add([]byte("---\n---\n"))
	f.Add([]byte("\t:"))
	f.Add([]byte(""))
	dir := f.TempDir()
	if err := os.CopyFS(filepath.Join(dir, "profiles"), os.DirFS(filepath.Join("testdata", "valid", "profiles"))); err != nil {
		f.Fatal(err)
	}
	path := filepath.Join(dir, "stet.yaml")
	env := lookup(testEnv())
	f.Fuzz(func(t *testing.T, data []byte) {
		// The file may name files to read, a database URL's sslrootcert
		// among them, percent-encoded; keep the fuzzer off devices.
		if bytes.Contains(data, []byte("/dev")) || bytes.Contains(data, []byte("/proc")) || bytes.Contains(bytes.ToLower(data), []byte("%2f")) {
			return
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := Load(path, env)
		if err == nil {
			if c == nil {
				t.Fatalf("Load(%q) = nil, nil", data)
			}
			return
		}
		var cerr *Error
		if !errors.As(err, &cerr) || c != nil || len(cerr.Problems) == 0 {
			t.Fatalf("Load(%q) = %v, %v; want nil and an *Error with problems", data, c, err)
		}
		for _, p := range cerr.Problems {
			if strings.HasPrefix(p.Reason, "cannot decode") {
				t.Fatalf("Load(%q): %q: the shape check missed it", data, p)
			}
			if p.Path == "" && p.Line == 0 && !strings.HasPrefix(p.Reason, "not valid YAML") && p.Reason != "holds more than one YAML document" {
				t.Fatalf("Load(%q): problem %q names no key path or line", data, p)
			}
		}
	})
}
