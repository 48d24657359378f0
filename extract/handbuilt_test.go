package extract

import (
	"math"
	"testing"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/stretchr/testify/require"
)

// handGraph is a small e-graph built from expressions for the tests, with a
// cost per operator.
type handGraph struct {
	g     *egraph.EGraph[egraph.NoData]
	names []handName // in the order added: after unions the first wins
	cost  map[string]float64
}

type handName struct {
	class egraph.ClassID
	name  string
}

func newHandGraph(cost map[string]float64) *handGraph {
	return &handGraph{g: egraph.NewPlain(), cost: cost}
}

// add adds an expression and names its class.
func (h *handGraph) add(t *testing.T, name, expr string) egraph.ClassID {
	t.Helper()
	c, err := h.g.AddExpr(expr)
	require.NoError(t, err)
	h.names = append(h.names, handName{c, name})
	return c
}

func (h *handGraph) union(a, b egraph.ClassID) { h.g.Union(a, b, "test") }

// costFunc prices a node by its operator; an operator missing from the
// table costs +Inf, so a test lists every operator it means to be usable.
func (h *handGraph) costFunc() CostFunc {
	return func(g *egraph.Graph, n egraph.NodeID) float64 {
		if c, ok := h.cost[g.Node(n).Op.String()]; ok {
			return c
		}
		return math.Inf(1)
	}
}

// problem rebuilds the e-graph and makes the Problem with the given roots.
func (h *handGraph) problem(t *testing.T, roots ...egraph.ClassID) (*Problem, error) {
	t.Helper()
	h.g.Rebuild()
	names := map[egraph.ClassID]string{}
	for _, n := range h.names {
		if _, ok := names[h.g.Find(n.class)]; !ok {
			names[h.g.Find(n.class)] = n.name
		}
	}
	return NewProblem(&h.g.Graph, roots, h.costFunc(), names)
}

func (h *handGraph) mustProblem(t *testing.T, roots ...egraph.ClassID) *Problem {
	t.Helper()
	p, err := h.problem(t, roots...)
	require.NoError(t, err)
	return p
}

// classOf is the problem's index of an e-graph class.
func classOf(t *testing.T, p *Problem, g *egraph.EGraph[egraph.NoData], c egraph.ClassID) int32 {
	t.Helper()
	c = g.Find(c)
	for i, id := range p.ClassIDs {
		if id == c {
			return int32(i)
		}
	}
	t.Fatalf("class %d is not in the problem", c)
	return -1
}

// chosenOps maps each needed class's name to the operator of its chosen
// node.
func chosenOps(p *Problem, g *egraph.EGraph[egraph.NoData], s *Solution) map[string]string {
	out := map[string]string{}
	for c, n := range s.Choice {
		if n >= 0 {
			out[p.ClassNames[c]] = g.Node(p.NodeIDs[n]).Op.String()
		}
	}
	return out
}
