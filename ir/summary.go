package ir

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// WriteSummary writes the graph's size as an aligned table: its name, its
// number of ops and parameters, of inputs, weights, states and outputs,
// then after a blank line each op with its count, the most frequent first
// and ops of equal count by name.
func (g *Graph) WriteSummary(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "graph\t%s\nops\t%d\nparams\t%d\ninputs\t%d\nweights\t%d\nstates\t%d\noutputs\t%d\n\n",
		g.Name, len(g.Nodes), g.NumParams(), len(g.Inputs()), len(g.Weights()), len(g.States()), len(g.Outputs))
	counts := g.OpCounts()
	ops := make([]Op, 0, len(counts))
	for op := range counts {
		ops = append(ops, op)
	}
	slices.SortFunc(ops, func(a, b Op) int {
		if counts[a] != counts[b] {
			return counts[b] - counts[a]
		}
		return strings.Compare(a.String(), b.String())
	})
	for _, op := range ops {
		fmt.Fprintf(tw, "%s\t%d\n", op, counts[op])
	}
	return tw.Flush()
}
