//go:build unix

package mmap

import (
	"fmt"
	"math"
	"os"

	"golang.org/x/sys/unix"
)

// Supported reports whether this platform maps files.
const Supported = true

// Map maps the first size bytes of f read-only and shared. An empty file
// gives an empty slice that needs no Unmap.
func Map(f *os.File, size int64) ([]byte, error) {
	if size == 0 {
		return []byte{}, nil
	}
	if size < 0 || uint64(size) > math.MaxInt {
		return nil, fmt.Errorf("file size %d cannot be mapped", size)
	}
	return unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
}

// Unmap releases a mapping made by Map.
func Unmap(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return unix.Munmap(b)
}
