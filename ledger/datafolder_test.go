package ledger_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stetlabs/stet/ledger"
)

// The SQLite file's folder is created 0700, and an existing one is
// narrowed to 0700: a folder left 0755 stayed 0755, letting every local
// user list it and open whatever in it is not 0600.
func TestSQLiteFolderIsPrivate(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		before os.FileMode // 0: the folder does not exist
	}{
		{"created", 0},
		{"existing 0755", 0o755},
		{"existing 0777", 0o777},
		{"existing 0700", 0o700},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "stet-data")
			if tt.before != 0 {
				if err := os.Mkdir(dir, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(dir, tt.before); err != nil { // past the umask
					t.Fatal(err)
				}
			}
			db, err := ledger.Open(t.Context(), "sqlite://"+filepath.Join(dir, "stet.db"))
			if err != nil {
				t.Fatalf("Open = %v", err)
			}
			db.Close()
			fi, err := os.Stat(dir)
			if err != nil || fi.Mode().Perm() != 0o700 {
				t.Errorf("folder mode after Open = %v (%v), want 0700", fi.Mode().Perm(), err)
			}
		})
	}
}

// A shared folder (sticky, as /tmp) is not narrowed: Open refuses it and
// creates nothing there.
func TestSQLiteFolderSharedRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	db, err := ledger.Open(t.Context(), "sqlite://"+filepath.Join(dir, "stet.db"))
	if err == nil {
		db.Close()
		t.Fatal("Open in a sticky folder = nil error, want a refusal")
	}
	if !strings.Contains(err.Error(), "folder of its own") {
		t.Errorf("Open in a sticky folder = %v, want it to ask for a folder of its own", err)
	}
	fi, _ := os.Stat(dir)
	if fi.Mode().Perm() != 0o777 || fileExists(filepath.Join(dir, "stet.db")) {
		t.Errorf("Open in a sticky folder changed it: mode %v, database file created %v", fi.Mode().Perm(), fileExists(filepath.Join(dir, "stet.db")))
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
