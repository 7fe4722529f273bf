package files_test

import (
	"testing"

	"github.com/ctxmgr/ctxmgr/store/files"
	"github.com/ctxmgr/ctxmgr/store/storetest"
)

// BenchmarkFilesAppend: durable one-message appends to the file store.
func BenchmarkFilesAppend(b *testing.B) {
	s, err := files.Open(b.TempDir(), files.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	storetest.BenchAppend(b, s)
}

// BenchmarkFilesLoad: reading a 2,000-message session back from the file store.
func BenchmarkFilesLoad(b *testing.B) {
	s, err := files.Open(b.TempDir(), files.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	storetest.BenchLoad(b, s)
}
