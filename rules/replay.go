package rules

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/extract"
	"github.com/lumsearch/lumsearch/ir"
)

// A model's layers are copies of one block, so the search runs on two of
// them: a graph of the first two copies holds one block, and the seam
// between two blocks, where one layer's last kernel meets the next one's
// first. That pair is saturated with every rule; its extracted program is
// then replayed on every consecutive pair of copies of the model's own
// e-graph, which gets only the lower and fuse rules for the parts outside
// the blocks (embedding, final norm, head), when those are among the
// rules. Replaying adds, for each copy,
// the nodes the pair's program chose, their operands mapped through the
// copies' correspondence (FindRepeats), and unions each with the class of
// the value it computes; extraction over the model's e-graph then picks
// them. The model's e-graph stays its own size plus the replayed program,
// instead of a saturated e-graph per layer.

// minRepeatNodes is the smallest block worth searching once for all.
const minRepeatNodes = 16

// BlockSearch says how SaturateModel used a model's repeated blocks.
type BlockSearch struct {
	Copies     int // copies of the block
	BlockNodes int // ops per copy
	// Pair is the saturation of the first two copies.
	Pair *Program
	// Replayed counts the e-nodes replaying added to the model's e-graph.
	Replayed int
}

// SaturateModel is Saturate for a model whose layers repeat: it saturates
// one pair of consecutive copies and replays the result on every copy (see
// above). A graph without a repeated block of at least three copies is
// saturated whole.
func SaturateModel(ctx context.Context, g *ir.Graph, rws []*egraph.Rewrite[Data], opt SaturateOptions) (*Program, error) {
	opt = opt.withDefaults()
	var rep *Repeats
	for _, r := range FindRepeats(g, minRepeatNodes) {
		if len(r.Copies) >= 3 && (rep == nil || len(r.Copies)*len(r.Copies[0].Nodes) > len(rep.Copies)*len(rep.Copies[0].Nodes)) {
			rep = &r
		}
	}
	if rep == nil {
		return Saturate(ctx, g, rws, opt)
	}
	start := time.Now()
	pairG, toG := pairGraph(g, rep)
	// The pair of blocks and the model's own e-graph are independent
	// subgraph searches until the replay joins them: they run in
	// parallel. Each is deterministic alone, so the result does not
	// depend on which finishes first.
	var pair *Program
	var grp errgroup.Group
	grp.Go(func() error {
		var err error
		pair, err = Saturate(ctx, pairG, rws, opt)
		return err
	})
	eg, an := NewEGraph(false)
	classes, err := AddGraph(eg, g)
	if err != nil {
		return nil, errors.Join(err, grp.Wait())
	}
	// The model's own e-graph gets the lower and fusion rules among rws
	// (by their names, which LowerRewrites and RegionRewrites give), so
	// that the parts outside the blocks have kernels; the rest of rws
	// would grow it a layer at a time.
	var local []*egraph.Rewrite[Data]
	for _, rw := range rws {
		if strings.HasPrefix(rw.Name(), "lower-") || strings.HasPrefix(rw.Name(), "region-") {
			local = append(local, rw)
		}
	}
	r := egraph.Runner[Data]{IterLimit: opt.IterLimit, NodeLimit: opt.NodeLimit, TimeLimit: opt.TimeLimit, Hooks: opt.hooks()}
	report, err := r.Run(ctx, eg, local)
	if werr := grp.Wait(); werr != nil {
		return nil, werr
	}
	if err != nil {
		return nil, fmt.Errorf("saturate %s: %w", g.Name, err)
	}
	before := eg.NumNodes()
	// The replayed nodes of the pairs of copies (0,1), (2,3), ... come
	// first, then the others: replayedSolution takes the first node
	// replayed into a class, so that it runs the pair's program on
	// disjoint pairs, each copy in the part (first or second of the pair)
	// its neighbors expect.
	var replayed, overlapping []replayedNode
	for k := 1; k < len(rep.Copies); k++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		m, err := pairMapping(g, rep, k)
		if err != nil {
			return nil, fmt.Errorf("saturate %s: %w", g.Name, err)
		}
		if k%2 == 1 {
			replayed, err = replay(eg, classes, pair, toG, m, replayed)
		} else {
			overlapping, err = replay(eg, classes, pair, toG, m, overlapping)
		}
		if err != nil {
			return nil, fmt.Errorf("saturate %s: replay on copies %d and %d: %w", g.Name, k-1, k, err)
		}
	}
	eg.Rebuild()
	if c := an.Conflicts(); len(c) > 0 {
		return nil, fmt.Errorf("saturate %s: replaying the block merged incompatible classes: %s", g.Name, c[0])
	}
	prog := &Program{EGraph: eg, Report: report, Classes: classes, Roots: GraphRoots(g, classes), Time: time.Since(start),
		Block: &BlockSearch{Copies: len(rep.Copies), BlockNodes: len(rep.Copies[0].Nodes), Pair: pair, Replayed: eg.NumNodes() - before}}
	prog.replayed = append(replayed, overlapping...)
	return prog, prog.extract(ctx, g.Name, opt.Cost)
}

// replayedNode is a node replay added to the model's e-graph: its class
// and content as added (the children canonical then).
type replayedNode struct {
	class egraph.ClassID
	node  egraph.Node
}

// replayedSolution is the partial extraction that runs the pair's program
// on every copy: each class a replayed node went into chooses it (the
// first replayed there, see SaturateModel), the other classes (outside the
// blocks) left out for choose to complete. It keeps what the pair's
// extraction found that pays only when several classes take it together
// (one projection of concatenated weights for the query, key and value),
// which a greedy pass over the model's classes one by one misses.
func replayedSolution(eg *egraph.EGraph[Data], p *extract.Problem, replayed []replayedNode) *extract.Solution {
	index := make(map[egraph.ClassID]int32, len(p.ClassIDs))
	for i, c := range p.ClassIDs {
		index[eg.Find(c)] = int32(i)
	}
	s := extract.NewSolution(p)
	for _, r := range replayed {
		ci, ok := index[eg.Find(r.class)]
		if !ok || s.Choice[ci] >= 0 {
			continue
		}
		for _, n := range p.ClassNodes[ci] {
			if sameNode(eg, eg.Node(p.NodeIDs[n]), r.node) {
				s.Choice[ci] = n
				break
			}
		}
	}
	return s
}

// sameNode reports whether a and b are one e-node: operator, payload and
// children's classes.
func sameNode(eg *egraph.EGraph[Data], a, b egraph.Node) bool {
	if a.Op != b.Op || a.Payload != b.Payload || len(a.Children) != len(b.Children) {
		return false
	}
	for i := range a.Children {
		if eg.Find(a.Children[i]) != eg.Find(b.Children[i]) {
			return false
		}
	}
	return true
}

// pairGraph builds the graph of a repeat's first two copies: their nodes,
// the weights they read, and every other value they read as an input. Its
// outputs are the copies' outputs. toG maps its values to
// g's.
func pairGraph(g *ir.Graph, rep *Repeats) (*ir.Graph, []ir.Value) {
	in := make([]bool, len(g.Nodes))
	for _, c := range rep.Copies[:2] {
		for _, v := range c.Nodes {
			in[v] = true
		}
	}
	readOutside := make([]bool, len(g.Nodes))
	for v, n := range g.Nodes {
		if !in[v] {
			for _, u := range n.Inputs {
				readOutside[u] = true
			}
		}
	}
	for _, o := range g.Outputs {
		readOutside[o.Value] = true
	}
	for _, u := range g.Updates {
		readOutside[u.Value] = true
	}
	// Each copy's outputs are outputs of the pair too, the seam included:
	// the pair's program then materializes what a copy hands the next one,
	// as every copy of the model must for the program to replay (a copy
	// that recomputed its predecessor's sums would read ever more of them
	// down the stack).
	for _, c := range rep.Copies[:2] {
		for _, v := range c.Outputs {
			readOutside[v] = true
		}
	}
	b := ir.NewBuilder(g.Name + " (two blocks)")
	val := make(map[ir.Value]ir.Value)
	var toG []ir.Value
	add := func(gv, pv ir.Value) {
		val[gv] = pv
		for len(toG) <= int(pv) {
			toG = append(toG, ir.NoValue)
		}
		toG[pv] = gv
	}
	for v, n := range g.Nodes {
		if !in[v] {
			continue
		}
		ins := make([]ir.Value, len(n.Inputs))
		for i, u := range n.Inputs {
			pv, ok := val[u]
			if !ok {
				un := g.Nodes[u]
				if un.Op.Class() == ir.ClassLeaf {
					pv = b.Apply(un.Op, un.Attrs)
				} else {
					pv = b.Input(fmt.Sprintf("%%%d", u), un.DType, un.Shape...)
				}
				add(u, pv)
			}
			ins[i] = pv
		}
		add(ir.Value(v), b.Apply(n.Op, n.Attrs, ins...))
		if readOutside[v] {
			b.Output(fmt.Sprintf("%%%d", v), val[ir.Value(v)])
		}
	}
	pg, err := b.Build()
	if err != nil {
		// The copies are a convex, topologically ordered part of a valid
		// graph: rebuilding them cannot fail.
		panic(fmt.Sprintf("pair graph of %s: %v", g.Name, err))
	}
	return pg, toG
}

// pairMapping maps the values of g that the pair graph stands for (those
// of copies 0 and 1 and what they read) to their counterparts for copies
// k-1 and k. Values without a counterpart (shared inputs) map to
// themselves.
func pairMapping(g *ir.Graph, rep *Repeats, k int) (map[ir.Value]ir.Value, error) {
	m := map[ir.Value]ir.Value{}
	for j, pair := range [2]int{k - 1, k} {
		from, to := rep.Copies[j], rep.Copies[pair]
		if len(from.Nodes) != len(to.Nodes) || len(from.Weights) != len(to.Weights) || len(from.Inputs) != len(to.Inputs) {
			return nil, fmt.Errorf("copies %d and %d do not correspond", j, pair)
		}
		for i, v := range from.Nodes {
			m[v] = to.Nodes[i]
		}
		for i, v := range from.Weights {
			m[v] = to.Weights[i]
		}
	}
	// Inputs come last: copy 1's inputs from copy 0 are copy 0's nodes,
	// mapped above; the others (copy 0's inputs, shared tables) map to
	// the corresponding inputs.
	for j, pair := range [2]int{k - 1, k} {
		from, to := rep.Copies[j], rep.Copies[pair]
		for i, v := range from.Inputs {
			if _, ok := m[v]; !ok {
				m[v] = to.Inputs[i]
			}
		}
	}
	return m, nil
}

// replay adds the pair's extracted program to the model's e-graph eg for
// the copies m maps the pair's values to: each chosen node, its operands
// replaced by the replayed classes, unioned with the class of the model
// value it computes.
func replay(eg *egraph.EGraph[Data], classes []egraph.ClassID, pair *Program, toG []ir.Value, m map[ir.Value]ir.Value, added []replayedNode) ([]replayedNode, error) {
	pe := pair.EGraph
	// The pair's values per class: a class may hold several (rules proved
	// them equal).
	values := map[egraph.ClassID][]ir.Value{}
	for pv, c := range pair.Classes {
		c = pe.Find(c)
		values[c] = append(values[c], ir.Value(pv))
	}
	target := func(pv ir.Value) egraph.ClassID {
		gv := toG[pv]
		if mv, ok := m[gv]; ok {
			gv = mv
		}
		return classes[gv]
	}
	order, err := pair.Solution.Needed(pair.Problem)
	if err != nil {
		return added, err
	}
	image := map[egraph.ClassID]egraph.ClassID{}
	for _, pc := range order {
		c := pair.Problem.ClassIDs[pc]
		n := pe.Node(pair.Problem.NodeIDs[pair.Solution.Choice[pc]])
		vs := values[pe.Find(c)]
		if op, ok := OpOf(n.Op); ok && op.Class() == ir.ClassLeaf {
			if len(vs) == 0 {
				return added, fmt.Errorf("leaf class %d of the pair has no value", c)
			}
			image[c] = target(vs[0])
			continue
		}
		kids := make([]egraph.ClassID, len(n.Children))
		for i, k := range n.Children {
			ic, ok := image[pe.Find(k)]
			if !ok {
				return added, fmt.Errorf("class %d reads class %d before it is replayed", c, k)
			}
			kids[i] = ic
		}
		node := egraph.Node{Op: n.Op, Payload: n.Payload, Children: kids}
		nc, err := eg.Add(node)
		if err != nil {
			return added, err
		}
		for _, pv := range vs {
			if t := target(pv); eg.Find(t) != eg.Find(nc) {
				eg.Union(t, nc, "replay of the block's program")
			}
		}
		image[c] = nc
		added = append(added, replayedNode{nc, node})
	}
	return added, nil
}
