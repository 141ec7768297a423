package drill

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stetlabs/stet/lab/stettest"
)

// binDir holds the stet binary, built at most once for the package.
var (
	binDir   string
	binOnce  sync.Once
	binPath  string
	binError error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "stet-drill-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "drill tests:", err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// stetBinary builds ./cmd/stet on first use (only the tests that run a
// drill need it) and returns its path.
func stetBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		go_, err := exec.LookPath("go")
		if err != nil {
			go_ = "go"
		}
		path := filepath.Join(binDir, "stet")
		build := exec.Command(go_, "build", "-o", path, "./cmd/stet")
		build.Dir = stettest.RepoRoot()
		if out, err := build.CombinedOutput(); err != nil {
			binError = fmt.Errorf("build the stet binary: %v\n%s", err, out)
			return
		}
		binPath = path
	})
	if binError != nil {
		t.Fatal(binError)
	}
	return binPath
}
