package extract

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/lumsearch/lumsearch/egraph"
)

// The algorithms RunFile runs, by the names reports give them.
const (
	// AlgorithmTree is Tree: the least tree cost, exactly.
	AlgorithmTree = "tree"
	// AlgorithmGreedyDAG is GreedyDAG: the DAG cost, greedily.
	AlgorithmGreedyDAG = "greedy-dag"
	// AlgorithmExact is Exact started from GreedyDAG: the least DAG cost
	// with a lower bound.
	AlgorithmExact = "exact"
	// AlgorithmFasterGreedyDAG is FasterGreedyDAG: extraction-gym's
	// "faster greedy DAG" as its source states it, the file's names
	// breaking ties.
	AlgorithmFasterGreedyDAG = "faster-greedy-dag"
)

// Algorithms are the algorithms RunFile runs.
var Algorithms = []string{AlgorithmTree, AlgorithmGreedyDAG, AlgorithmFasterGreedyDAG, AlgorithmExact}

// FileOptions say how RunFile extracts.
type FileOptions struct {
	// Algorithm is AlgorithmTree, AlgorithmGreedyDAG or AlgorithmExact.
	Algorithm string
	// Timeout stops extraction after this long (0: no limit beyond ctx);
	// exact extraction then reports its best solution so far.
	Timeout time.Duration
	// Nodes asks for the chosen e-nodes in FileReport.Nodes.
	Nodes bool
	// Load says how the file becomes a problem (LoadOptions: the file's
	// own classes by default).
	Load LoadOptions
}

// FileReport is the outcome of extracting from an egraph-serialize file:
// the costs of the chosen program, its size, and how long loading and
// extraction took. It is what "lumsearch extract" prints, as text
// (WriteText) or as JSON; the field order is the JSON object's.
type FileReport struct {
	File      string  `json:"file"`
	Algorithm string  `json:"algorithm"`
	DAGCost   float64 `json:"dag_cost"`
	TreeCost  float64 `json:"tree_cost"`
	// LowerBound, Gap and Optimal are set for AlgorithmExact only. Gap is
	// (cost - lower bound) / cost, 0 when both are 0.
	LowerBound *float64 `json:"lower_bound,omitempty"`
	Gap        *float64 `json:"gap,omitempty"`
	Optimal    *bool    `json:"optimal,omitempty"`
	// Classes is the number of e-classes the program needs; EClasses and
	// ENodes are the e-graph's sizes.
	Classes        int     `json:"needed_eclasses"`
	EClasses       int     `json:"eclasses"`
	ENodes         int     `json:"enodes"`
	LoadSeconds    float64 `json:"load_seconds"`
	ExtractSeconds float64 `json:"extract_seconds"`
	// Nodes are the chosen nodes, children before parents (with
	// FileOptions.Nodes only).
	Nodes []ChosenNode `json:"nodes,omitempty"`

	// LoadTime and ExtractTime are LoadSeconds and ExtractSeconds as
	// durations.
	LoadTime    time.Duration `json:"-"`
	ExtractTime time.Duration `json:"-"`
}

// ChosenNode is one chosen e-node, named as the file names it.
type ChosenNode struct {
	Node   string  `json:"node"`
	EClass string  `json:"eclass"`
	Op     string  `json:"op"`
	Cost   float64 `json:"cost"`
}

// RunFile loads the egraph-serialize file at path with the file's costs
// (FromFile with opt.Load), extracts a program with opt's algorithm, and reports on it.
// Both costs are recomputed from the chosen program, whatever the algorithm
// aimed at, so that they always describe the same program. Errors name the
// algorithm and the file; one caused by opt.Timeout says so.
func RunFile(ctx context.Context, path string, opt FileOptions) (*FileReport, error) {
	if !slices.Contains(Algorithms, opt.Algorithm) {
		return nil, fmt.Errorf("extract: unknown algorithm %q (want %s)", opt.Algorithm, strings.Join(Algorithms, ", "))
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	start := time.Now()
	p, f, err := FromFile(path, opt.Load)
	if err != nil {
		return nil, fmt.Errorf("load e-graph: %w", err) // the error names the file
	}
	rep := &FileReport{
		File:      path,
		Algorithm: opt.Algorithm,
		EClasses:  f.EClasses,
		ENodes:    f.ENodes,
		LoadTime:  time.Since(start),
	}

	ectx := ctx
	if opt.Timeout > 0 {
		var cancel context.CancelFunc
		ectx, cancel = context.WithTimeout(ctx, opt.Timeout)
		defer cancel()
	}
	start = time.Now()
	var sol *Solution
	switch opt.Algorithm {
	case AlgorithmTree:
		sol, _, err = Tree(ectx, p)
	case AlgorithmGreedyDAG:
		sol, _, err = GreedyDAGNamed(ectx, p, f.names(p))
	case AlgorithmFasterGreedyDAG:
		sol, _, err = FasterGreedyDAG(ectx, p, f.names(p))
	case AlgorithmExact:
		sol, err = exactFromGreedy(ectx, p, opt.Timeout, f.names(p), rep)
	}
	rep.ExtractTime = time.Since(start)
	if err != nil {
		if ctx.Err() == nil && ectx.Err() != nil {
			return nil, fmt.Errorf("%s extraction of %s: stopped by --timeout %v: %w", opt.Algorithm, path, opt.Timeout, err)
		}
		return nil, fmt.Errorf("%s extraction of %s: %w", opt.Algorithm, path, err)
	}
	if rep.DAGCost, err = sol.DAGCost(p); err == nil {
		rep.TreeCost, err = sol.TreeCost(p)
	}
	if err != nil {
		return nil, fmt.Errorf("%s extraction of %s: %w", opt.Algorithm, path, err)
	}
	order, err := sol.Needed(p)
	if err != nil {
		return nil, fmt.Errorf("%s extraction of %s: %w", opt.Algorithm, path, err)
	}
	rep.Classes = len(order)
	rep.LoadSeconds = rep.LoadTime.Seconds()
	rep.ExtractSeconds = rep.ExtractTime.Seconds()
	if opt.Nodes {
		rep.Nodes = chosenNodes(p, f, sol, order)
	}
	return rep, nil
}

// exactFromGreedy runs exact extraction from the greedy solution and
// records its bound in rep. The greedy start is cheap next to the solver
// and often already optimal, which the exact search can then prove without
// a solver.
func exactFromGreedy(ctx context.Context, p *Problem, timeout time.Duration, names FasterGreedyOptions, rep *FileReport) (*Solution, error) {
	start, _, err := GreedyDAGNamed(ctx, p, names)
	if err != nil {
		return nil, err
	}
	res, err := Exact(ctx, p, ExactOptions{Timeout: timeout, Start: start})
	if err != nil {
		return nil, err
	}
	lb, opt := res.LowerBound, res.Optimal
	gap := 0.0
	if res.Cost != 0 {
		gap = (res.Cost - res.LowerBound) / math.Abs(res.Cost)
	}
	rep.LowerBound, rep.Gap, rep.Optimal = &lb, &gap, &opt
	return res.Solution, nil
}

// chosenNodes lists the chosen nodes of the needed classes in order.
func chosenNodes(p *Problem, f *File, sol *Solution, order []int32) []ChosenNode {
	out := make([]ChosenNode, 0, len(order))
	for _, c := range order {
		n := sol.Choice[c]
		id := p.NodeIDs[n]
		out = append(out, ChosenNode{
			Node:   f.NodeName[id],
			EClass: p.ClassNames[c],
			Op:     f.NodeOp[id],
			Cost:   p.Nodes[n].Cost,
		})
	}
	return out
}

// WriteText writes the report as "name: value" lines with the values
// aligned, the cost the algorithm aimed at first, then the chosen nodes if
// there are any.
func (r *FileReport) WriteText(w io.Writer) error {
	dag := [2]string{"dag cost", fmt.Sprint(r.DAGCost)}
	tree := [2]string{"tree cost", fmt.Sprint(r.TreeCost)}
	costs := [][2]string{dag, tree}
	if r.Algorithm == AlgorithmTree {
		costs = [][2]string{tree, dag}
	}
	lines := [][2]string{{"file", r.File}, {"algorithm", r.Algorithm}}
	lines = append(lines, costs...)
	if r.LowerBound != nil && r.Gap != nil && r.Optimal != nil {
		state := "not proven optimal"
		if *r.Optimal {
			state = "proven optimal"
		}
		lines = append(lines,
			[2]string{"bound", fmt.Sprint(*r.LowerBound)},
			[2]string{"gap", fmt.Sprintf("%.4g%% (%s)", 100**r.Gap, state)})
	}
	lines = append(lines,
		[2]string{"e-classes", fmt.Sprintf("%d needed of %d (%d e-nodes)", r.Classes, r.EClasses, r.ENodes)},
		[2]string{"load time", r.LoadTime.Round(time.Microsecond).String()},
		[2]string{"time", r.ExtractTime.Round(time.Microsecond).String()})
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "%-10s %s\n", l[0]+":", l[1])
	}
	if len(r.Nodes) > 0 {
		b.WriteString("nodes (children first):\n")
		for _, n := range r.Nodes {
			fmt.Fprintf(&b, "  %s  e-class %s  op %s  cost %v\n", egraph.QuoteName(n.Node), egraph.QuoteName(n.EClass), n.Op, n.Cost)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
