//go:build unix

package safetensors

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// mapFile maps path read-only (PROT_READ, MAP_SHARED). An empty file is
// returned as an empty, unmapped slice (mmap rejects length 0). mapped tells
// whether the result must be released with unmap.
func mapFile(path string) (data []byte, mapped bool, err error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, false, fmt.Errorf("safetensors: %w", err)
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return nil, false, fmt.Errorf("safetensors: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, false, &Error{File: path, Reason: "not a regular file"}
	}
	size := st.Size()
	if size == 0 {
		return []byte{}, false, nil
	}
	if size < 0 || size != int64(int(size)) {
		return nil, false, &Error{File: path, Reason: fmt.Sprintf("file size %d cannot be mapped", size)}
	}
	data, err = unix.Mmap(int(fd.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, false, &Error{File: path, Reason: "mmap", Err: err}
	}
	return data, true, nil
}

// unmap releases a mapping made by mapFile.
func unmap(data []byte) error { return unix.Munmap(data) }
