//go:build !unix

package onnx

import (
	"errors"
	"os"
)

// mapReadOnly is not available off Unix: external data is only ever
// mapped, never read onto the heap.
func mapReadOnly(f *os.File, size int64) ([]byte, error) {
	return nil, errors.New("memory-mapping external data is only supported on Unix")
}

// unmap has nothing to release off Unix.
func unmap(b []byte) error { return nil }
