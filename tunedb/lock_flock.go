//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly || illumos

package tunedb

import (
	"os"
	"syscall"
)

// lockSupported reports whether this platform locks files.
const lockSupported = true

// lockFile takes an advisory lock on all of f with flock(2), exclusive or
// shared, waiting as long as another open file holds a conflicting one. The
// lock belongs to this open file: another open of the same file, in this
// process or another, conflicts with it; closing f releases it.
func lockFile(f *os.File, exclusive bool) error {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	return flock(f, how)
}

// unlockFile releases f's lock.
func unlockFile(f *os.File) error { return flock(f, syscall.LOCK_UN) }

func flock(f *os.File, how int) error {
	conn, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	err = conn.Control(func(fd uintptr) {
		for {
			ferr = syscall.Flock(int(fd), how)
			if ferr != syscall.EINTR {
				return
			}
		}
	})
	if err != nil {
		return err
	}
	if ferr != nil {
		return &os.PathError{Op: "flock", Path: f.Name(), Err: ferr}
	}
	return nil
}
