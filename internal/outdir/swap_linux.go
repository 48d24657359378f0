package outdir

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// swap puts the folder tmp in place of dir and returns where dir's old
// content went ("" when there was none). On Linux an existing dir is
// exchanged with tmp in one renameat2(RENAME_EXCHANGE), so that no
// instant sees dir missing or mixed; a file system without it falls back
// on two renames.
func swap(tmp, dir string) (string, error) {
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return "", os.Rename(tmp, dir)
	}
	err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dir, unix.RENAME_EXCHANGE)
	if err == nil {
		return tmp, nil
	}
	if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOTSUP) {
		return "", err
	}
	return swapByRenames(tmp, dir)
}

// alive says whether process pid still runs.
func alive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// syncDir makes a folder's entries durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}
