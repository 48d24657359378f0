package extract

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// reportSharingJSON is x = (k (g c) (h c)) | (m d): the least tree cost
// takes m (14 against 23), the least DAG cost takes k (13 against 14).
const reportSharingJSON = `{"nodes": {
  "k": {"op": "k", "cost": 1, "eclass": "x", "children": ["g", "h"]},
  "m": {"op": "m", "cost": 1, "eclass": "x", "children": ["d"]},
  "g": {"op": "g", "cost": 1, "eclass": "gc", "children": ["c"]},
  "h": {"op": "h", "cost": 1, "eclass": "hc", "children": ["c"]},
  "c": {"op": "c", "cost": 10, "eclass": "c", "children": []},
  "d": {"op": "d", "cost": 13, "eclass": "d", "children": []}
}, "root_eclasses": ["x"]}`

// reportForcedJSON has one node per class, so exact extraction proves its
// greedy start optimal without a solver.
const reportForcedJSON = `{"nodes": {
  "f": {"op": "f", "cost": 1, "eclass": "r", "children": ["a", "a", "b"]},
  "a": {"op": "a", "cost": 2, "eclass": "a", "children": []},
  "b": {"op": "b", "cost": 3, "eclass": "b", "children": []}
}, "root_eclasses": ["r"]}`

func TestRunFile(t *testing.T) {
	sharing := writeTemp(t, reportSharingJSON)
	forced := writeTemp(t, reportForcedJSON)
	for _, tt := range []struct {
		name      string
		path      string
		algo      string
		dag, tree float64
		classes   int
		nodes     []string
	}{
		{"tree", sharing, AlgorithmTree, 14, 14, 2, []string{"d", "m"}},
		{"greedy", sharing, AlgorithmGreedyDAG, 13, 23, 4, []string{"c", "g", "h", "k"}},
		{"exact without solver", forced, AlgorithmExact, 6, 8, 3, []string{"a", "b", "f"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := RunFile(context.Background(), tt.path, FileOptions{Algorithm: tt.algo, Timeout: time.Minute, Nodes: true})
			require.NoError(t, err)
			assert.Equal(t, tt.path, rep.File)
			assert.Equal(t, tt.algo, rep.Algorithm)
			assert.Equal(t, tt.dag, rep.DAGCost)
			assert.Equal(t, tt.tree, rep.TreeCost)
			assert.Equal(t, tt.classes, rep.Classes)
			assert.Equal(t, rep.LoadTime.Seconds(), rep.LoadSeconds)
			assert.Equal(t, rep.ExtractTime.Seconds(), rep.ExtractSeconds)
			var names []string
			for _, n := range rep.Nodes {
				names = append(names, n.Node)
			}
			assert.ElementsMatch(t, tt.nodes, names)
			assert.Equal(t, tt.algo == AlgorithmExact, rep.LowerBound != nil)
			if tt.algo == AlgorithmExact {
				assert.Equal(t, 6.0, *rep.LowerBound)
				assert.Equal(t, 0.0, *rep.Gap)
				assert.True(t, *rep.Optimal)
			}
		})
	}

	rep, err := RunFile(context.Background(), sharing, FileOptions{Algorithm: AlgorithmTree})
	require.NoError(t, err)
	assert.Nil(t, rep.Nodes, "nodes only when asked")
	assert.Equal(t, 5, rep.EClasses)
	assert.Equal(t, 6, rep.ENodes)
}

func TestRunFileErrors(t *testing.T) {
	good := writeTemp(t, reportSharingJSON)
	dead := writeTemp(t, `{"nodes": {"a": {"op": "x", "cost": 1, "eclass": "top", "children": [], "subsumed": true}}, "root_eclasses": ["top"]}`)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tt := range []struct {
		name string
		ctx  context.Context
		path string
		algo string
		want []string
	}{
		{"unknown algorithm", context.Background(), good, "ilp", []string{`unknown algorithm "ilp"`}},
		{"no algorithm", context.Background(), good, "", []string{`unknown algorithm ""`}},
		{"missing file", context.Background(), "/nonexistent/g.json", AlgorithmTree, []string{"load e-graph: ", "/nonexistent/g.json"}},
		{"root not computable", context.Background(), dead, AlgorithmGreedyDAG, []string{"load e-graph: " + dead + ": ", "root class top cannot be computed"}},
		{"canceled", canceled, good, AlgorithmTree, []string{"context canceled"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := RunFile(tt.ctx, tt.path, FileOptions{Algorithm: tt.algo})
			require.Error(t, err)
			assert.Nil(t, rep)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestFileReportWriteText(t *testing.T) {
	lb, gap, optimal := 12.0, 0.0769, false
	base := FileReport{File: "f.json", DAGCost: 13, TreeCost: 23, Classes: 4, EClasses: 5, ENodes: 6,
		LoadTime: 1500 * time.Microsecond, ExtractTime: 2 * time.Millisecond}
	tail := "e-classes: 4 needed of 5 (6 e-nodes)\nload time: 1.5ms\ntime:      2ms\n"
	for _, tt := range []struct {
		name string
		edit func(r *FileReport)
		want string
	}{
		{"greedy", func(r *FileReport) { r.Algorithm = AlgorithmGreedyDAG },
			"file:      f.json\nalgorithm: greedy-dag\ndag cost:  13\ntree cost: 23\n" + tail},
		{"tree cost first", func(r *FileReport) { r.Algorithm = AlgorithmTree },
			"file:      f.json\nalgorithm: tree\ntree cost: 23\ndag cost:  13\n" + tail},
		{"exact bound", func(r *FileReport) {
			r.Algorithm, r.LowerBound, r.Gap, r.Optimal = AlgorithmExact, &lb, &gap, &optimal
		}, "file:      f.json\nalgorithm: exact\ndag cost:  13\ntree cost: 23\nbound:     12\ngap:       7.69% (not proven optimal)\n" + tail},
		{"nodes", func(r *FileReport) {
			r.Algorithm = AlgorithmGreedyDAG
			r.Nodes = []ChosenNode{{Node: "c", EClass: "c", Op: "c", Cost: 10}, {Node: "n 1", EClass: "", Op: "k", Cost: 1.5}}
		}, "file:      f.json\nalgorithm: greedy-dag\ndag cost:  13\ntree cost: 23\n" + tail +
			"nodes (children first):\n  c  e-class c  op c  cost 10\n  \"n 1\"  e-class \"\"  op k  cost 1.5\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := base
			tt.edit(&r)
			var b bytes.Buffer
			require.NoError(t, r.WriteText(&b))
			assert.Equal(t, tt.want, b.String())
		})
	}
}

func TestFileReportJSON(t *testing.T) {
	path := writeTemp(t, reportSharingJSON)
	rep, err := RunFile(context.Background(), path, FileOptions{Algorithm: AlgorithmGreedyDAG, Nodes: true})
	require.NoError(t, err)
	data, err := json.Marshal(rep)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(data, &m))
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	assert.ElementsMatch(t, []string{"file", "algorithm", "dag_cost", "tree_cost", "needed_eclasses", "eclasses",
		"enodes", "load_seconds", "extract_seconds", "nodes"}, keys, "no bound without exact, no durations")
	assert.True(t, strings.HasPrefix(string(data), `{"file":`), "field order is the report's")
	var back FileReport
	require.NoError(t, json.Unmarshal(data, &back))
	assert.Equal(t, rep.Nodes, back.Nodes)
}
