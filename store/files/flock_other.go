//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package files

import (
	"context"
	"os"
)

// lockFD is a no-op on platforms without flock(2); the in-process mutexes still serialize
// the goroutines of one process.
func lockFD(ctx context.Context, fh *os.File, exclusive bool) error {
	return ctx.Err()
}
