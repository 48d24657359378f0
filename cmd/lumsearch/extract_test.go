package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/extract"
)

// sharingJSON is x = (k (g c) (h c)) | (m d): tree cost prefers m
// (1+13 = 14 against 1+11+11 = 23), DAG cost prefers k (1+1+1+10 = 13).
const sharingJSON = `{"nodes": {
  "k": {"op": "k", "cost": 1, "eclass": "x", "children": ["g", "h"]},
  "m": {"op": "m", "cost": 1, "eclass": "x", "children": ["d"]},
  "g": {"op": "g", "cost": 1, "eclass": "gc", "children": ["c"]},
  "h": {"op": "h", "cost": 1, "eclass": "hc", "children": ["c"]},
  "c": {"op": "c", "cost": 10, "eclass": "c", "children": []},
  "d": {"op": "d", "cost": 13, "eclass": "d", "children": []}
}, "root_eclasses": ["x"]}`

func TestExtractText(t *testing.T) {
	path := writeFile(t, "sharing.json", sharingJSON)
	for _, tt := range []struct {
		algo  string
		lines []string
	}{
		{"greedy-dag", []string{"algorithm: greedy-dag\ndag cost:  13\ntree cost: 23\n", "e-classes: 4 needed of 5 (6 e-nodes)\n"}},
		{"tree", []string{"algorithm: tree\ntree cost: 14\ndag cost:  14\n", "e-classes: 2 needed of 5 (6 e-nodes)\n"}},
		{"exact", []string{"algorithm: exact\ndag cost:  13\ntree cost: 23\nbound:     13\ngap:       0% (proven optimal)\n"}},
	} {
		t.Run(tt.algo, func(t *testing.T) {
			if tt.algo == "exact" {
				needCBC(t)
			}
			r := runArgs(t, "extract", path, "--algo", tt.algo)
			require.Equal(t, exitOK, r.code, r.stderr)
			assert.Empty(t, r.stderr)
			assert.True(t, strings.HasPrefix(r.stdout, "file:      "+path+"\n"), r.stdout)
			for _, l := range tt.lines {
				assert.Contains(t, r.stdout, l)
			}
			assert.Regexp(t, `(?m)^load time: \S+\ntime:      \S+\n$`, r.stdout)
			assert.NotContains(t, r.stdout, "nodes (children")
		})
	}
}

func TestExtractNodes(t *testing.T) {
	path := writeFile(t, "sharing.json", sharingJSON)
	r := runArgs(t, "extract", "--nodes", path, "--algo", "tree")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "nodes (children first):\n"+
		"  d  e-class d  op d  cost 13\n"+
		"  m  e-class x  op m  cost 1\n")

	r = runArgs(t, "extract", path, "--nodes", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var rep extract.FileReport
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	assert.Equal(t, "greedy-dag", rep.Algorithm)
	assert.Equal(t, 13.0, rep.DAGCost)
	assert.Equal(t, 23.0, rep.TreeCost)
	assert.Nil(t, rep.LowerBound, "only exact has a bound")
	assert.Equal(t, 4, rep.Classes)
	require.Len(t, rep.Nodes, 4)
	assert.Equal(t, extract.ChosenNode{Node: "c", EClass: "c", Op: "c", Cost: 10}, rep.Nodes[0])
	assert.Equal(t, extract.ChosenNode{Node: "k", EClass: "x", Op: "k", Cost: 1}, rep.Nodes[3])
}

// needCBC skips a test that needs exact extraction to run the cbc solver.
func needCBC(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("cbc"); err != nil {
		t.Skip("cbc not installed")
	}
}

func TestExtractExactJSONWithoutSolver(t *testing.T) {
	// Every class has one node, so the start meets the lower bound of the
	// classes every solution needs and no solver runs.
	path := writeFile(t, "forced.json", `{"nodes": {
	  "f": {"op": "f", "cost": 1, "eclass": "r", "children": ["a", "a", "b"]},
	  "a": {"op": "a", "cost": 2, "eclass": "a", "children": []},
	  "b": {"op": "b", "cost": 3, "eclass": "b", "children": []}
	}, "root_eclasses": ["r"]}`)
	r := runArgs(t, "extract", path, "--algo", "exact", "--json", "--timeout", "0")
	require.Equal(t, exitOK, r.code, r.stderr)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &m))
	assert.Equal(t, 6.0, m["dag_cost"])
	assert.Equal(t, 8.0, m["tree_cost"])
	assert.Equal(t, 6.0, m["lower_bound"])
	assert.Equal(t, 0.0, m["gap"])
	assert.Equal(t, true, m["optimal"])
	assert.NotContains(t, m, "nodes")
}

func TestExtractExactWithSolver(t *testing.T) {
	needCBC(t)
	r := runArgs(t, "extract", ac4, "--algo", "exact")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "dag cost:  7\n")
	assert.Contains(t, r.stdout, "(proven optimal)")
}

func TestExtractErrors(t *testing.T) {
	good := writeFile(t, "sharing.json", sharingJSON)
	bad := writeFile(t, "bad.json", `{"nodes": {"a": {"op": "x", "cost": "1", "eclass": "0", "children": []}}, "root_eclasses": ["0"]}`)
	dead := writeFile(t, "dead.json", `{"nodes": {"a": {"op": "x", "cost": 1, "eclass": "top", "children": [], "subsumed": true}}, "root_eclasses": ["top"]}`)
	for _, tt := range []struct {
		name   string
		args   []string
		code   int
		stderr []string
	}{
		{"no file", []string{"extract"}, exitUsage, []string{"lumsearch: extract: missing FILE.json", "Run 'lumsearch extract -h'"}},
		{"two files", []string{"extract", good, good}, exitUsage, []string{"want one FILE.json, got 2 arguments"}},
		{"unknown algo", []string{"extract", good, "--algo", "ilp"}, exitUsage, []string{`unknown --algo "ilp"`}},
		{"bad timeout", []string{"extract", good, "--timeout", "soon"}, exitUsage, []string{"-timeout"}},
		{"negative timeout", []string{"extract", good, "--timeout", "-1s"}, exitUsage, []string{"must not be negative"}},
		{"missing file", []string{"extract", "/nonexistent/g.json"}, exitError, []string{"/nonexistent/g.json"}},
		{"malformed file", []string{"extract", bad}, exitError, []string{bad, `$.nodes["a"].cost`}},
		{"root not computable", []string{"extract", dead}, exitError, []string{"root class top cannot be computed"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := runArgs(t, tt.args...)
			assert.Equal(t, tt.code, r.code, r.stderr)
			assert.Empty(t, r.stdout)
			for _, s := range tt.stderr {
				assert.Contains(t, r.stderr, s)
			}
		})
	}
}

func TestExtractCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"extract", ac4}, &stdout, &stderr)
	assert.Equal(t, exitError, code)
	assert.Empty(t, stdout.String())
	assert.Contains(t, stderr.String(), "context canceled")
}
