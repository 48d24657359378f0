package rules

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/egraph"
	"github.com/stretchr/testify/require"
)

var updateCaps = flag.Bool("update", false, "rewrite testdata/node-caps.txt with the node counts measured now")

// capModels are the corpus graphs whose e-graph sizes CI watches. They are
// small enough to saturate with every rule set in a test.
var capModels = []string{"tiny-llama:mlp", "tiny-llama:rmsnorm", "tiny-llama:attention", "tiny-gpt2:mlp", "tiny-gpt2:layernorm", "tiny-llama:layer", "llama-3-8b:layer"}

// TestNodeCaps saturates corpus graphs with all rule sets and fails when an
// e-graph grows past its committed cap (testdata/node-caps.txt): a rule
// change that blows up the e-graph shows here first. The cap is the count
// measured when it was last updated, plus a quarter.
func TestNodeCaps(t *testing.T) {
	// Parallel: the package's longest tests, independent of each other,
	// share the machine's cores once the sequential tests are done.
	t.Parallel()
	caps := map[string]int{}
	if f, err := os.Open("testdata/node-caps.txt"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) == 2 && !strings.HasPrefix(fields[0], "#") {
				n, err := strconv.Atoi(fields[1])
				require.NoError(t, err)
				caps[fields[0]] = n
			}
		}
		f.Close()
	} else if !*updateCaps {
		t.Fatalf("testdata/node-caps.txt missing; run go test ./rules -run TestNodeCaps -update")
	}
	var rws []*egraph.Rewrite[Data]
	for _, s := range Sets() {
		r, err := SetRewrites(s)
		require.NoError(t, err)
		rws = append(rws, r...)
	}
	out := []string{"# e-node caps of saturated corpus e-graphs (all rule sets); go test ./rules -run TestNodeCaps -update"}
	for _, name := range capModels {
		g, err := corpus.Build(name, corpus.Options{Seq: 8})
		require.NoError(t, err)
		prog, err := Saturate(context.Background(), g, rws, SaturateOptions{IterLimit: 8, NodeLimit: 50_000})
		require.NoError(t, err)
		n := prog.EGraph.NumNodes()
		t.Logf("%s: %d e-nodes (%s), %d kernels", name, n, prog.Report.Stop, prog.Kernels)
		out = append(out, fmt.Sprintf("%s %d", name, n+n/4))
		if !*updateCaps {
			limit, ok := caps[name]
			require.True(t, ok, "%s has no cap; run with -update", name)
			require.LessOrEqual(t, n, limit, "%s's e-graph grew past its cap", name)
		}
	}
	if *updateCaps {
		require.NoError(t, os.WriteFile("testdata/node-caps.txt", []byte(strings.Join(out, "\n")+"\n"), 0o644))
	}
}
