//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/store/sqlite"
	"github.com/ctxmgr/ctxmgr/store/storetest"
)

// TestHelperProcess is the crash writer of TestCrash (storetest.RunCrash).
func TestHelperProcess(t *testing.T) {
	storetest.CrashWriter(func(path string) (store.Store, error) { return sqlite.Open(path, sqlite.Options{}) })
}

// TestCrash runs the suite's kill test on SQLite.
func TestCrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ctxmgr.db")
	storetest.RunCrash(t, storetest.CrashOptions{
		Target: path,
		Reopen: func(t *testing.T) store.Store {
			s, err := sqlite.Open(path, sqlite.Options{})
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			return s
		},
	})
}

// TestHelperProcessRelaxed is the crash writer of TestCrashRelaxed.
func TestHelperProcessRelaxed(t *testing.T) {
	storetest.CrashWriter(func(path string) (store.Store, error) {
		return sqlite.Open(path, sqlite.Options{Relaxed: true})
	})
}

// TestCrashRelaxed: synchronous=NORMAL (the proxy's mode) is as safe as FULL when the process
// is killed; only a power cut can take the last commits.
func TestCrashRelaxed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ctxmgr.db")
	storetest.RunCrash(t, storetest.CrashOptions{
		Target:     path,
		HelperTest: "TestHelperProcessRelaxed",
		Reopen: func(t *testing.T) store.Store {
			s, err := sqlite.Open(path, sqlite.Options{Relaxed: true})
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			return s
		},
	})
}
