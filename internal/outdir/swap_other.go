//go:build !linux

package outdir

import (
	"errors"
	"os"
)

// swap puts the folder tmp in place of dir and returns where dir's old
// content went ("" when there was none). Without Linux's
// renameat2(RENAME_EXCHANGE) it takes two renames, between which dir is
// briefly missing (never mixed).
func swap(tmp, dir string) (string, error) {
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return "", os.Rename(tmp, dir)
	}
	return swapByRenames(tmp, dir)
}

// alive says whether process pid may still run: without a portable
// check, every writer is taken to be alive, so that no staging folder in
// use is removed.
func alive(pid int) bool { return true }

// syncDir is a no-op where folders cannot be synced.
func syncDir(dir string) error { return nil }
