//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

// Tests that need flock(2) and POSIX signals: several stores on one directory, and a writer
// killed with SIGKILL.

package files_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/store/files"
	"github.com/ctxmgr/ctxmgr/store/storetest"
)

// TestFilesTwoStores runs two Files values on one directory (storetest.RunTwoHandles) and
// checks the raw files: exactly one dialog line per archived position.
func TestFilesTwoStores(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	storetest.RunTwoHandles(t, openFiles(t, dir, files.Options{}), openFiles(t, dir, files.Options{}))
	dialog, _ := filepath.Glob(filepath.Join(dir, "sessions", "shared", "dialog", "*.jsonl"))
	total := 0
	for _, p := range dialog {
		total += len(jsonLines(t, p))
	}
	if total != 10 {
		t.Fatalf("%d archive lines on disk, want 10", total)
	}
}

// TestHelperProcess is the crash writer of TestFilesCrash (storetest.RunCrash).
func TestHelperProcess(t *testing.T) {
	storetest.CrashWriter(func(dir string) (store.Store, error) { return files.Open(dir, files.Options{}) })
}

// TestFilesCrash runs the suite's kill test on the file store, and checks the raw files too:
// a torn last line is tolerated on reopen and every file is valid JSONL after it.
func TestFilesCrash(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	torn := 0
	storetest.RunCrash(t, storetest.CrashOptions{
		Target: dir,
		Reopen: func(t *testing.T) store.Store { return openFiles(t, dir, files.Options{}) },
		AfterKill: func(t *testing.T, round int) {
			if b, err := os.ReadFile(filepath.Join(dir, "sessions", "crash", "messages.jsonl")); err == nil && len(b) > 0 && b[len(b)-1] != '\n' {
				torn++
			}
		},
		AfterClose: func(t *testing.T, round int) {
			sdir := filepath.Join(dir, "sessions", "crash")
			jsonLines(t, filepath.Join(sdir, "messages.jsonl"))
			jsonLines(t, filepath.Join(sdir, "summaries.jsonl"))
		},
	})
	t.Logf("%d of 5 kills left a torn line behind", torn)
}
