package egraph

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
)

// DotOptions says how to draw an e-graph with Graphviz.
type DotOptions struct {
	// Label names a node; by default Node.String's operator and payload.
	Label func(n Node) string
	// MaxNodes refuses e-graphs with more e-nodes than this, because dot
	// cannot lay out big ones usefully (default 2000; negative: no limit).
	MaxNodes int
}

// WriteDot draws a rebuilt e-graph in Graphviz dot: one cluster per class,
// one box per node, and an edge from each node to the cluster of each
// child. Output is deterministic.
func WriteDot(w io.Writer, g *Graph, opt DotOptions) error {
	limit := opt.MaxNodes
	if limit == 0 {
		limit = 2000
	}
	if limit > 0 && g.NumNodes() > limit {
		return fmt.Errorf("dot: the e-graph has %d e-nodes, more than the limit of %d", g.NumNodes(), limit)
	}
	label := opt.Label
	if label == nil {
		label = func(n Node) string {
			if n.Payload == 0 {
				return n.Op.String()
			}
			return fmt.Sprintf("%s[%d]", n.Op, uint64(n.Payload))
		}
	}
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, "digraph egraph {")
	fmt.Fprintln(bw, "  compound=true; clusterrank=local;")
	fmt.Fprintln(bw, "  node [shape=box, style=rounded];")
	for _, c := range g.Classes() {
		fmt.Fprintf(bw, "  subgraph cluster_%d {\n    style=dotted; label=%s;\n", c, strconv.Quote(fmt.Sprintf("e%d", c)))
		for _, nid := range g.ClassNodes(c) {
			fmt.Fprintf(bw, "    n%d [label=%s];\n", nid, strconv.Quote(label(g.Node(nid))))
		}
		fmt.Fprintln(bw, "  }")
	}
	for _, c := range g.Classes() {
		for _, nid := range g.ClassNodes(c) {
			for i, k := range g.Node(nid).Children {
				k = g.find(k)
				target := g.ClassNodes(k)[0]
				fmt.Fprintf(bw, "  n%d -> n%d [lhead=cluster_%d, label=%d];\n", nid, target, k, i)
			}
		}
	}
	fmt.Fprintln(bw, "}")
	return bw.Flush()
}
