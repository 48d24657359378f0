package outdir

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// swapByRenames moves dir aside and tmp into its place: dir is missing
// for the moment between the two renames, and put back when the second
// fails.
func swapByRenames(tmp, dir string) (string, error) {
	old, err := os.MkdirTemp(filepath.Dir(dir), stagePrefix(filepath.Base(dir))+strconv.Itoa(os.Getpid())+"-old-*")
	if err != nil {
		return "", err
	}
	if err := os.Remove(old); err != nil {
		return "", err
	}
	if err := os.Rename(dir, old); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if rerr := os.Rename(old, dir); rerr != nil {
			return "", fmt.Errorf("%w; the old folder is in %s", err, old)
		}
		return "", err
	}
	return old, nil
}
