//go:build !unix

package mmap

import (
	"errors"
	"os"
)

// Supported reports whether this platform maps files.
const Supported = false

// Map is not available off Unix.
func Map(f *os.File, size int64) ([]byte, error) {
	return nil, errors.New("memory-mapping files is only supported on Unix")
}

// Unmap has nothing to release off Unix.
func Unmap(b []byte) error { return nil }
