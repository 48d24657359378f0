package safetensors

import (
	"fmt"
	"os"

	"github.com/lumsearch/lumsearch/internal/mmap"
)

// mapFile maps path read-only. An empty file is returned as an empty,
// unmapped slice. On platforms without mmap the file is read instead, so
// only there a checkpoint is copied. mapped tells whether the result must be
// released with unmap.
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
	if !mmap.Supported {
		data, err = os.ReadFile(path)
		if err != nil {
			return nil, false, fmt.Errorf("safetensors: %w", err)
		}
		return data, false, nil
	}
	size := st.Size()
	if size == 0 {
		return []byte{}, false, nil
	}
	data, err = mmap.Map(fd, size)
	if err != nil {
		return nil, false, &Error{File: path, Reason: "mmap", Err: err}
	}
	return data, true, nil
}

// unmap releases a mapping made by mapFile.
func unmap(data []byte) error { return mmap.Unmap(data) }
