//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly || illumos || windows)

package tunedb

import (
	"fmt"
	"os"
	"runtime"
)

// lockSupported reports whether this platform locks files.
const lockSupported = false

// errNoLock says that this platform has no file lock the database can use:
// reading works unlocked, writing refuses.
var errNoLock = fmt.Errorf("tuning database: file locking is not supported on %s", runtime.GOOS)

func lockFile(f *os.File, exclusive bool) error { return errNoLock }

func unlockFile(f *os.File) error { return nil }
