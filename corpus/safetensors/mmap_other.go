//go:build !unix

package safetensors

import (
	"fmt"
	"os"
)

// mapFile reads the whole file on platforms without mmap support in
// golang.org/x/sys/unix. Only unix builds are zero-copy.
func mapFile(path string) (data []byte, mapped bool, err error) {
	data, err = os.ReadFile(path)
	if err != nil {
		return nil, false, fmt.Errorf("safetensors: %w", err)
	}
	return data, false, nil
}

// unmap is never called on non-unix platforms (nothing is mapped).
func unmap([]byte) error { return nil }
