package egraph

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

// golden compares got with testdata/name, or rewrites the file under
// -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -update to create %s", path)
	require.Equal(t, string(want), string(got), "output differs from %s (go test -update rewrites it)", path)
}

func TestGoldenAC4(t *testing.T) {
	g, root, _ := saturateACRoot(t, 4, SimpleScheduler{})

	var dot bytes.Buffer
	require.NoError(t, WriteDot(&dot, &g.Graph, DotOptions{}))
	golden(t, "ac4.dot", dot.Bytes())

	var js bytes.Buffer
	require.NoError(t, ToSerialized(&g.Graph, []ClassID{root}, SerializeOptions{}).Write(&js))
	golden(t, "ac4.json", js.Bytes())

	err := WriteDot(&bytes.Buffer{}, &g.Graph, DotOptions{MaxNodes: 3})
	require.ErrorContains(t, err, "more than the limit")
}
