//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package store

import (
	"context"
	"os"
)

// crossProcessLocks reports whether this platform has the advisory file locks that make the
// file store safe for several processes sharing one directory. Here it does not: one process
// per directory.
const crossProcessLocks = false

// lockFD is a no-op on platforms without flock(2); the in-process mutexes still serialize
// the goroutines of one process.
func lockFD(ctx context.Context, fh *os.File, exclusive bool) error {
	return ctx.Err()
}
