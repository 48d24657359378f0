package rules

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/extract"
	"github.com/lumsearch/lumsearch/ir"
)

// Sets lists every rule set used by default, by name: the built-in rule
// files and the rule sets written in Go (lower, fuse).
func Sets() []string { return append(BuiltinSets(), "lower", "fuse") }

// OptionalSets lists the rule sets used only when asked for: fuse-pairs,
// pairwise kernel fusion (a kernel absorbs one producer kernel per step),
// which reaches the bodies region fusion builds in one step through every
// intermediate one, at many times the e-nodes and time.
func OptionalSets() []string { return []string{"fuse-pairs"} }

// SetRewrites returns a rule set's rewrites by name.
func SetRewrites(name string) ([]*egraph.Rewrite[Data], error) {
	switch name {
	case "lower":
		return LowerRewrites(), nil
	case "fuse":
		return RegionRewrites(), nil
	case "fuse-pairs":
		return FuseRewrites(), nil
	}
	rs, err := Builtin(name)
	if err != nil {
		return nil, err
	}
	return Rewrites(rs), nil
}

// SaturateOptions limit a saturation and say how extraction prices it.
type SaturateOptions struct {
	IterLimit int           // default 30
	NodeLimit int           // default 200,000
	TimeLimit time.Duration // default 60 s
	// Cost prices the e-graph's nodes for extraction; nil means the
	// simple estimate (SimpleCost). ModelCost gives the cost model's.
	Cost func(*egraph.EGraph[Data]) extract.CostFunc
	// Progress, when set, hears of every saturation iteration as it ends
	// (from SaturateModel's two searches at once: it must be safe for
	// concurrent use).
	Progress func(it *egraph.Iteration)
}

// hooks are the runner hooks that report opt's progress.
func (opt SaturateOptions) hooks() []egraph.Hook[Data] {
	if opt.Progress == nil {
		return nil
	}
	return []egraph.Hook[Data]{func(_ *egraph.EGraph[Data], it *egraph.Iteration) error {
		opt.Progress(it)
		return nil
	}}
}

// Program is the result of saturating a graph and extracting the cheapest
// kernel program by the simple estimate.
type Program struct {
	EGraph *egraph.EGraph[Data]
	Report *egraph.Report
	// Classes are the e-graph classes of the graph's values (AddGraph's),
	// Roots the classes the program computes.
	Classes []egraph.ClassID
	Roots   []Root
	// Problem and Solution are the extraction.
	Problem  *extract.Problem
	Solution *extract.Solution
	// Kernels counts the launches of one run; Prep the kernels that
	// depend on weights only and run once at load time.
	Kernels int
	Prep    int
	List    []Kernel // the kernels, in evaluation order
	Cost    float64  // estimated seconds
	Graph   *ir.Graph
	Time    time.Duration // saturation time
	// Block, when the graph has repeated blocks, says how the search ran
	// on one pair of them (SaturateModel).
	Block *BlockSearch
	// replayed are the nodes replaying Block's program added.
	replayed []replayedNode
}

// withDefaults fills SaturateOptions' defaults in.
func (opt SaturateOptions) withDefaults() SaturateOptions {
	if opt.IterLimit <= 0 {
		opt.IterLimit = 30
	}
	if opt.NodeLimit <= 0 {
		opt.NodeLimit = 200_000
	}
	if opt.TimeLimit <= 0 {
		opt.TimeLimit = time.Minute
	}
	return opt
}

// Saturate builds g's e-graph, runs the rewrites, and extracts the
// cheapest kernel program (greedy DAG over the simple estimate, then
// extract.Improve's local search), returned as an ir graph with kernel
// bodies inlined.
func Saturate(ctx context.Context, g *ir.Graph, rws []*egraph.Rewrite[Data], opt SaturateOptions) (*Program, error) {
	opt = opt.withDefaults()
	eg, an := NewEGraph(false)
	classes, err := AddGraph(eg, g)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	r := egraph.Runner[Data]{IterLimit: opt.IterLimit, NodeLimit: opt.NodeLimit, TimeLimit: opt.TimeLimit, Hooks: opt.hooks()}
	rep, err := r.Run(ctx, eg, rws)
	if err != nil {
		return nil, fmt.Errorf("saturate %s: %w", g.Name, err)
	}
	prog := &Program{EGraph: eg, Report: rep, Classes: classes, Roots: GraphRoots(g, classes), Time: time.Since(start)}
	if c := an.Conflicts(); len(c) > 0 {
		return nil, fmt.Errorf("saturate %s: a rule merged incompatible classes: %s", g.Name, c[0])
	}
	return prog, prog.extract(ctx, g.Name, opt.Cost)
}

// NaiveProgram is the naive program of g (DESIGN.md): one kernel per
// tensor op, every intermediate in memory, priced as opt says. Speed-ups
// are reported against it.
func NaiveProgram(ctx context.Context, g *ir.Graph, opt SaturateOptions) (*Program, error) {
	return Saturate(ctx, g, LowerRewrites(), opt)
}

// extract picks the program from the saturated e-graph and fills the
// extraction's fields in (the program as choose picks it).
func (prog *Program) extract(ctx context.Context, name string, price func(*egraph.EGraph[Data]) extract.CostFunc) error {
	eg := prog.EGraph
	if price == nil {
		price = SimpleCost
	}
	p, err := extract.NewProblem(&eg.Graph, RootClasses(prog.Roots), price(eg), nil)
	if err != nil {
		return fmt.Errorf("saturate %s: no kernel program: %w", name, err)
	}
	sol, cost, err := prog.choose(ctx, eg, p)
	if err != nil {
		return err
	}
	prog.Problem, prog.Solution, prog.Cost = p, sol, cost
	if prog.List, err = ProgramKernels(eg, p, sol); err != nil {
		return err
	}
	prog.Kernels, prog.Prep = 0, 0
	for _, k := range prog.List {
		if k.Prep {
			prog.Prep++
		} else {
			prog.Kernels++
		}
	}
	prog.Graph, err = SolutionGraph(&eg.Graph, name, prog.Roots, p, sol)
	return err
}

// choose extracts the program from p. A model searched on a pair of its
// blocks runs the pair's program on every copy (replayedSolution), the
// classes outside the blocks (embedding, final norm, head) chosen greedily
// around it: the pair's extraction already searched the block, and a
// greedy pass over every class of every copy, which costs most of a large
// model's extraction, found no better program on the corpus. When the
// replayed choices cannot be completed (a cycle through mixed choices), or
// there are none, it is GreedyDAG improved by Improve, or the program
// without cross-block partial sums when that is cheaper.
func (prog *Program) choose(ctx context.Context, eg *egraph.EGraph[Data], p *extract.Problem) (*extract.Solution, float64, error) {
	if prog.replayed != nil {
		sol, cost, err := extract.GreedyFrom(ctx, p, replayedSolution(eg, p, prog.replayed))
		if err == nil {
			return sol, cost, nil
		}
		if ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
	}
	// The program without cross-block partial sums is a second greedy
	// pass over a masked copy of the problem: it runs beside the first,
	// both only reading p and the e-graph, and is improved on p against
	// the first one's greedy choices once they are ready.
	type result struct {
		sol  *extract.Solution
		cost float64
		ok   bool
	}
	var greedy *extract.Greedy
	var err error
	greedyReady := make(chan struct{})
	altc := make(chan result, 1)
	go func() {
		sol, cost, ok := extractWithoutCrossSums(ctx, eg, p, func() *extract.Greedy { <-greedyReady; return greedy })
		altc <- result{sol, cost, ok}
	}()
	greedy, err = extract.NewGreedy(ctx, p)
	close(greedyReady)
	if err != nil {
		<-altc
		return nil, 0, err
	}
	sol, cost, err := greedy.Improved(ctx)
	alt := <-altc
	if err != nil {
		return nil, 0, err
	}
	if alt.ok && alt.cost < cost {
		sol, cost = alt.sol, alt.cost
	}
	return sol, cost, nil
}

// RuleStat sums one rule's share of a saturation.
type RuleStat struct {
	Name             string
	Matches, Applied int
	NewNodes         int
	Time             time.Duration
}

// RuleStats sums a report per rule, in rule order.
func RuleStats(rep *egraph.Report) []RuleStat {
	var out []RuleStat
	index := map[string]int{}
	for _, it := range rep.Iterations {
		for _, r := range it.Rules {
			i, ok := index[r.Name]
			if !ok {
				i = len(out)
				index[r.Name] = i
				out = append(out, RuleStat{Name: r.Name})
			}
			s := &out[i]
			s.Matches += r.Matches
			s.Applied += r.Applied
			s.NewNodes += r.NewNodes
			s.Time += r.Search + r.Apply
		}
	}
	return out
}

// Ablation is the program found without one rule set.
type Ablation struct {
	Without string
	Kernels int
	Prep    int
	Nodes   int
	Stop    egraph.StopReason
	Time    time.Duration
	Cost    float64
	Err     error
}

// Ablate saturates g once per rule set, leaving that set out.
func Ablate(ctx context.Context, g *ir.Graph, sets []string, opt SaturateOptions) ([]Ablation, error) {
	var out []Ablation
	for _, leave := range sets {
		var rws []*egraph.Rewrite[Data]
		for _, s := range sets {
			if s == leave {
				continue
			}
			r, err := SetRewrites(s)
			if err != nil {
				return nil, err
			}
			rws = append(rws, r...)
		}
		a := Ablation{Without: leave}
		if prog, err := SaturateModel(ctx, g, rws, opt); err != nil {
			a.Err = err
		} else {
			a.Kernels, a.Prep, a.Cost = prog.Kernels, prog.Prep, prog.Cost
			a.Nodes, a.Stop, a.Time = prog.EGraph.NumNodes(), prog.Report.Stop, prog.Time
		}
		out = append(out, a)
	}
	return out, nil
}

// Kernel is one kernel of an extracted program.
type Kernel struct {
	Class egraph.ClassID
	// Outputs are the types of what it writes (one, or a multi-output
	// kernel's several).
	Outputs []ir.ValueType
	// Prep says it depends on weights only and runs once at load time.
	Prep bool
	Body *ir.Graph
	Form Form
}

// ProgramKernels lists the kernels of an extraction, in evaluation order:
// the needed classes whose chosen node is a kernel term.
func ProgramKernels(eg *egraph.EGraph[Data], p *extract.Problem, sol *extract.Solution) ([]Kernel, error) {
	order, err := sol.Needed(p)
	if err != nil {
		return nil, err
	}
	var out []Kernel
	for _, c := range order {
		n := eg.Node(p.NodeIDs[sol.Choice[c]])
		if n.Op != KernelSymbol {
			continue
		}
		body, ok := Spec(n.Payload)
		if !ok {
			return nil, fmt.Errorf("class %d: a kernel with an unknown body", p.ClassIDs[c])
		}
		d := eg.Data(p.ClassIDs[c])
		outs := d.Outputs
		if !d.IsTuple() {
			outs = []ir.ValueType{{Shape: d.Shape, DType: d.DType}}
		}
		out = append(out, Kernel{Class: p.ClassIDs[c], Outputs: outs, Prep: d.WeightOnly, Body: body, Form: FormOf(body)})
	}
	return out, nil
}

// CountKernels counts the kernels of an extraction: those of one run (the
// launches) and those that depend on weights only (prepared once at load
// time).
func CountKernels(eg *egraph.EGraph[Data], p *extract.Problem, sol *extract.Solution) (run, prep int, err error) {
	ks, err := ProgramKernels(eg, p, sol)
	for _, k := range ks {
		if k.Prep {
			prep++
		} else {
			run++
		}
	}
	return run, prep, err
}

// NaiveKernels is the kernel count of the naive program: one launch per op
// that computes (views and leaves are free).
func NaiveKernels(g *ir.Graph) int {
	n := 0
	for _, node := range g.Nodes {
		if c := node.Op.Class(); c != ir.ClassLeaf && c != ir.ClassView {
			n++
		}
	}
	return n
}

// extractWithoutCrossSums is a second start for extraction: the greedy
// program of the e-graph without the kernels that sum split-K partials as
// they read them (CrossSumRewrites), refined by Improve over all of p. The
// greedy choices are made class by class, and those kernels give a class
// cheap options that tie it to one split (a kernel reading a split
// projection's partials), which can lead it away from a program where
// several classes share one unsplit kernel; starting from the program
// without them and improving keeps the better of both. ok is false when
// there is no such program (or nothing to leave out).
func extractWithoutCrossSums(ctx context.Context, eg *egraph.EGraph[Data], p *extract.Problem, greedyOf func() *extract.Greedy) (*extract.Solution, float64, bool) {
	crossKernel := func(id egraph.NodeID) bool {
		n := eg.Node(id)
		return n.Op == KernelSymbol && readsCrossSum(n.Payload)
	}
	some := false
	for _, id := range p.NodeIDs {
		some = some || crossKernel(id)
	}
	if !some {
		return nil, 0, false
	}
	// p's prices, not the cost function again: pricing every kernel is
	// a large part of building a problem. A node p left out (it cannot
	// be computed) stays out.
	priced := make(map[egraph.NodeID]float64, len(p.NodeIDs))
	for i, id := range p.NodeIDs {
		priced[id] = p.Nodes[i].Cost
	}
	masked := func(g *egraph.Graph, id egraph.NodeID) float64 {
		v, ok := priced[id]
		if !ok || crossKernel(id) {
			return math.Inf(1)
		}
		return v
	}
	roots := make([]egraph.ClassID, len(p.Roots))
	for i, r := range p.Roots {
		roots[i] = p.ClassIDs[r]
	}
	p2, err := extract.NewProblem(&eg.Graph, roots, masked, nil)
	if err != nil {
		return nil, 0, false
	}
	s2, _, err := extract.GreedyImproved(ctx, p2)
	if err != nil {
		return nil, 0, false
	}
	// The same choices in p's numbering.
	class := make(map[egraph.ClassID]int32, len(p.ClassIDs))
	for i, c := range p.ClassIDs {
		class[c] = int32(i)
	}
	node := make(map[egraph.NodeID]int32, len(p.NodeIDs))
	for i, id := range p.NodeIDs {
		node[id] = int32(i)
	}
	start := extract.NewSolution(p)
	for c, ch := range s2.Choice {
		if ch < 0 {
			continue
		}
		ci, ok1 := class[p2.ClassIDs[c]]
		ni, ok2 := node[p2.NodeIDs[ch]]
		if !ok1 || !ok2 {
			return nil, 0, false
		}
		start.Choice[ci] = ni
	}
	greedy := greedyOf()
	if greedy == nil {
		return nil, 0, false
	}
	sol, cost, err := greedy.Improve(ctx, start)
	if err != nil {
		return nil, 0, false
	}
	return sol, cost, true
}
