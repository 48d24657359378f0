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

// AdviseHuge is advice: on any slice, aligned or not, large or small, the
// memory stays usable and its values unchanged.
func TestAdviseHuge(t *testing.T) {
	for _, tc := range []struct{ size, offset int }{{0, 0}, {100, 0}, {5 << 20, 0}, {9 << 20, 3}} {
		b := make([]byte, tc.size+tc.offset)[tc.offset:]
		for i := range b {
			b[i] = byte(i * 7)
		}
		AdviseHuge(b)
		for i := range b {
			if b[i] != byte(i*7) {
				require.Equal(t, byte(i*7), b[i], "byte %d", i)
			}
		}
	}
	f := make([]float32, 3<<20)
	AdviseHugeFloat32(f)
	f[len(f)-1] = 1
	g := make([]float64, 3<<20)
	AdviseHugeFloat64(g)
	g[len(g)-1] = 1
	require.Equal(t, float32(1), f[len(f)-1])
	require.Equal(t, 1.0, g[len(g)-1])
}
