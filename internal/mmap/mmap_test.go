package mmap

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMap(t *testing.T) {
	if !Supported {
		t.Skip("no mmap on this platform")
	}
	path := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(path, []byte("weights"), 0o644))
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	b, err := Map(f, 7)
	require.NoError(t, err)
	require.Equal(t, "weights", string(b))
	require.NoError(t, Unmap(b))
	empty, err := Map(f, 0)
	require.NoError(t, err)
	require.Empty(t, empty)
	require.NoError(t, Unmap(empty))
	_, err = Map(f, -1)
	require.ErrorContains(t, err, "cannot be mapped")
}
