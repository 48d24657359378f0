package extract

import (
	"context"
	"encoding/csv"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lumsearch/lumsearch/internal/shareddata"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gymReference is one row of extraction-gym's reference-costs.csv.
type gymReference struct {
	name       string // "tensat/bert"
	path       string
	enodes     int
	eclasses   int
	treeOpt    float64 // bottomup_tree_cost_OPTIMAL
	greedyDAG  float64 // fastergreedydag_dag_cost
	bottomUp   float64 // bottomup_dag_cost
	ilpDAG     float64 // ilp_dag_cost, NaN where the solver found none
	ilpOptimal bool
}

// gymReferences reads reference-costs.csv, or skips without the shared
// data.
func gymReferences(t testing.TB) []gymReference {
	t.Helper()
	dir := filepath.Join(shareddata.Dir(t), "extraction-gym")
	f, err := os.Open(filepath.Join(dir, "reference-costs.csv"))
	require.NoError(t, err)
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	require.Greater(t, len(rows), 1)
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	num := func(row []string, name string) float64 {
		i, ok := col[name]
		require.True(t, ok, "column %s", name)
		if row[i] == "" {
			return math.NaN()
		}
		v, err := strconv.ParseFloat(row[i], 64)
		require.NoError(t, err, "%s of %s", name, row[0])
		return v
	}
	var out []gymReference
	for _, row := range rows[1:] {
		rel := strings.TrimPrefix(row[col["file"]], "data/")
		out = append(out, gymReference{
			name:       strings.TrimSuffix(rel, ".json"),
			path:       filepath.Join(dir, rel),
			enodes:     int(num(row, "enodes")),
			eclasses:   int(num(row, "eclasses")),
			treeOpt:    num(row, "bottomup_tree_cost_OPTIMAL"),
			greedyDAG:  num(row, "fastergreedydag_dag_cost"),
			bottomUp:   num(row, "bottomup_dag_cost"),
			ilpDAG:     num(row, "ilp_dag_cost"),
			ilpOptimal: row[col["ilp_status"]] == "Optimal",
		})
	}
	return out
}

// TestReferenceCosts runs Tree, FasterGreedyDAG and GreedyDAG on every
// extraction-gym file, each loaded as the file's own problem: the tree
// cost must be the reference optimum, FasterGreedyDAG must reproduce the
// published faster-greedy-DAG cost, and greedy DAG must do at least as
// well.
func TestReferenceCosts(t *testing.T) {
	for _, ref := range gymReferences(t) {
		t.Run(ref.name, func(t *testing.T) {
			p, f, err := FromFile(ref.path, LoadOptions{})
			require.NoError(t, err)
			ctx := context.Background()
			require.Equal(t, ref.eclasses, f.EClasses, "the file's own e-classes")
			require.Equal(t, ref.enodes, f.ENodes)

			// extraction-gym's own algorithm reproduces its published cost.
			fs, fgd, err := FasterGreedyDAG(ctx, p, f.names(p))
			require.NoError(t, err)
			require.NoError(t, fs.Check(p))
			assert.InEpsilon(t, ref.greedyDAG, fgd, 1e-9, "faster greedy DAG cost")

			start := time.Now()
			ts, tree, err := Tree(ctx, p)
			require.NoError(t, err)
			treeTime := time.Since(start)
			require.NoError(t, ts.Check(p))
			assert.InEpsilon(t, ref.treeOpt, tree, 1e-9, "tree cost")

			start = time.Now()
			gs, dag, err := GreedyDAG(ctx, p)
			require.NoError(t, err)
			greedyTime := time.Since(start)
			require.NoError(t, gs.Check(p))
			got, err := gs.DAGCost(p)
			require.NoError(t, err)
			assert.Equal(t, got, dag)
			assert.LessOrEqual(t, dag, ref.greedyDAG*(1+1e-9), "greedy DAG cost")
			if ref.ilpOptimal {
				assert.GreaterOrEqual(t, dag, ref.ilpDAG*(1-1e-9), "greedy DAG cost below the ILP optimum")
			}
			t.Logf("classes %d/%d nodes %d/%d tree %v (ref %v, %v) greedy %v (ref %v, bottom-up %v, ilp %v, %v)",
				p.NumClasses(), ref.eclasses, len(p.Nodes), ref.enodes, tree, ref.treeOpt, treeTime, dag, ref.greedyDAG, ref.bottomUp, ref.ilpDAG, greedyTime)
		})
	}
}
