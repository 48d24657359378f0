package extract

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func writeTemp(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "g.json")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	return path
}

func TestFromFileErrors(t *testing.T) {
	for _, tc := range []struct {
		name, json string
		want       []string
	}{
		{"bad cost", `{"nodes": {"a": {"op": "x", "cost": "1", "eclass": "0", "children": []}}, "root_eclasses": ["0"]}`,
			[]string{`$.nodes["a"].cost`}},
		{"unknown child", `{"nodes": {"a": {"op": "x", "cost": 1, "eclass": "0", "children": ["zz"]}}, "root_eclasses": ["0"]}`,
			[]string{`$.nodes["a"].children[0]`, `"zz"`}},
		{"unknown root", `{"nodes": {"a": {"op": "x", "cost": 1, "eclass": "0", "children": []}}, "root_eclasses": ["9"]}`,
			[]string{`$.root_eclasses[0]`}},
		{"root only subsumed", `{"nodes": {"a": {"op": "x", "cost": 1, "eclass": "top", "children": [], "subsumed": true}}, "root_eclasses": ["top"]}`,
			[]string{"root class top cannot be computed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeTemp(t, tc.json)
			_, _, err := FromFile(path, LoadOptions{})
			require.Error(t, err)
			assert.Contains(t, err.Error(), path, "the error names the file")
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
	_, _, err := FromFile(filepath.Join(t.TempDir(), "missing.json"), LoadOptions{})
	assert.ErrorContains(t, err, "missing.json")
}

func TestFromFileSubsumedAndNames(t *testing.T) {
	// The cheap leaf of class "leaf" is subsumed, so the root pays for the
	// dear one: 1 + 5.
	path := writeTemp(t, `{"nodes": {
		"r": {"op": "f", "cost": 1, "eclass": "root", "children": ["cheap"]},
		"cheap": {"op": "a", "cost": 0.5, "eclass": "leaf", "children": [], "subsumed": true},
		"dear": {"op": "b", "cost": 5, "eclass": "leaf", "children": []}
	}, "root_eclasses": ["root"]}`)
	p, im, err := FromFile(path, LoadOptions{})
	require.NoError(t, err)
	s, tree, err := Tree(context.Background(), p)
	require.NoError(t, err)
	assert.Equal(t, 6.0, tree)
	var chosen []string
	for _, n := range s.Choice {
		if n >= 0 {
			chosen = append(chosen, im.NodeName[p.NodeIDs[n]])
		}
	}
	assert.ElementsMatch(t, []string{"r", "dear"}, chosen)
	assert.ElementsMatch(t, []string{"root", "leaf"}, p.ClassNames)
}
