//go:build unix

package onnx

import (
	"fmt"
	"math"
	"os"

	"golang.org/x/sys/unix"
)

// mapReadOnly maps the first size bytes of f read-only and shared. An
// empty file gives an empty, unmapped slice.
func mapReadOnly(f *os.File, size int64) ([]byte, error) {
	if size == 0 {
		return []byte{}, nil
	}
	if size < 0 || uint64(size) > math.MaxInt {
		return nil, fmt.Errorf("file size %d does not fit in memory", size)
	}
	return unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
}

// unmap releases a mapping made by mapReadOnly.
func unmap(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return unix.Munmap(b)
}
