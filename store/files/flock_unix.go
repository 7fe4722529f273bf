//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package files

import (
	"context"
	"errors"
	"os"
	"syscall"
	"time"
)

// lockFD takes an advisory lock (flock(2)) on fh, exclusive or shared, waiting until it is
// free or ctx ends. The lock belongs to the open file description: closing fh releases it,
// and so does the death of the process.
func lockFD(ctx context.Context, fh *os.File, exclusive bool) error {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	fd := int(fh.Fd())
	wait := 50 * time.Microsecond
	for {
		err := syscall.Flock(fd, how|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EINTR):
			continue
		case !errors.Is(err, syscall.EWOULDBLOCK):
			return &os.PathError{Op: "flock", Path: fh.Name(), Err: err}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		if wait < 5*time.Millisecond {
			wait *= 2
		}
	}
}
