//go:build windows

package tunedb

import (
	"os"

	"golang.org/x/sys/windows"
)

// lockSupported reports whether this platform locks files.
const lockSupported = true

// lockFile locks all of f with LockFileEx, exclusive or shared, waiting as
// long as another handle holds a conflicting lock. Closing f releases it.
func lockFile(f *os.File, exclusive bool) error {
	var flags uint32
	if exclusive {
		flags = windows.LOCKFILE_EXCLUSIVE_LOCK
	}
	ol := new(windows.Overlapped)
	if err := windows.LockFileEx(windows.Handle(f.Fd()), flags, 0, ^uint32(0), ^uint32(0), ol); err != nil {
		return &os.PathError{Op: "LockFileEx", Path: f.Name(), Err: err}
	}
	return nil
}

// unlockFile releases f's lock.
func unlockFile(f *os.File) error {
	ol := new(windows.Overlapped)
	if err := windows.UnlockFileEx(windows.Handle(f.Fd()), 0, ^uint32(0), ^uint32(0), ol); err != nil {
		return &os.PathError{Op: "UnlockFileEx", Path: f.Name(), Err: err}
	}
	return nil
}
