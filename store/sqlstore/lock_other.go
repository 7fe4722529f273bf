//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package sqlstore

import "os"

// tryLock reports false where flock(2) is missing: no process can be sure to be the
// journal's only user, so none journals (appends write the database directly).
func tryLock(f *os.File) (bool, error) { return false, nil }
