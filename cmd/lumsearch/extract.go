package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/extract"
)

// Names of the extraction algorithms, as --algo takes them.
const (
	algoTree   = "tree"
	algoGreedy = "greedy-dag"
	algoExact  = "exact"
)

// extractCommand extracts a program from an egraph-serialize file.
var extractCommand = &command{
	name:     "extract",
	summary:  "choose the cheapest program in an egraph-serialize JSON file",
	synopsis: "extract FILE.json [--algo tree|greedy-dag|exact] [--timeout 10s] [--json] [--nodes]",
	doc: `
Read FILE.json in the egraph-serialize format, with the file's node costs
(nodes marked subsumed are never chosen), and choose one e-node for each
e-class the root e-classes need.

--algo tree finds the least tree cost, where a shared subterm is paid each
time it is used; it is exact. --algo greedy-dag aims at the least DAG cost,
where each chosen e-class is paid once, greedily in the manner of
extraction-gym's "faster greedy DAG". --algo exact finds the least DAG cost
and proves it, starting from the greedy solution; it needs the cbc solver for
hard files, and when --timeout stops it first it reports the best solution
found, a lower bound and the gap between them.

The report gives the file, the algorithm, the DAG cost and the tree cost of
the chosen program (whichever the algorithm aimed at is listed first), the
number of e-classes it needs, and how long loading and extraction took. With
--nodes it also lists the chosen e-nodes by the file's node ids, children
before parents.`,
	example: `
lumsearch extract egraph/testdata/ac4.json
lumsearch extract egraph/testdata/ac4.json --algo tree --nodes
lumsearch extract FILE.json --algo exact --timeout 30s --json`,
	setup: func(fs *flag.FlagSet) action {
		algo := fs.String("algo", algoGreedy, "extraction `algorithm`: tree, greedy-dag or exact")
		timeout := fs.Duration("timeout", 10*time.Second, "stop extraction after `d` (0: no limit); exact then reports its best so far")
		asJSON := fs.Bool("json", false, "print the report as one JSON object")
		nodes := fs.Bool("nodes", false, "also list the chosen e-nodes")
		return func(ctx context.Context, pos []string, stdout io.Writer) error {
			switch len(pos) {
			case 0:
				return usagef("missing FILE.json")
			case 1:
			default:
				return usagef("want one FILE.json, got %d arguments: %s", len(pos), strings.Join(pos, " "))
			}
			switch *algo {
			case algoTree, algoGreedy, algoExact:
			default:
				return usagef("unknown --algo %q; want tree, greedy-dag or exact", *algo)
			}
			if *timeout < 0 {
				return usagef("--timeout must not be negative, got %v", *timeout)
			}
			return runExtract(ctx, pos[0], *algo, *timeout, *asJSON, *nodes, stdout)
		}
	},
}

// extractReport is what the extract command prints, in text or as JSON.
type extractReport struct {
	File      string  `json:"file"`
	Algorithm string  `json:"algorithm"`
	DAGCost   float64 `json:"dag_cost"`
	TreeCost  float64 `json:"tree_cost"`
	// LowerBound, Gap and Optimal are set for --algo exact only. Gap is
	// (cost - lower bound) / cost, 0 when both are 0.
	LowerBound     *float64 `json:"lower_bound,omitempty"`
	Gap            *float64 `json:"gap,omitempty"`
	Optimal        *bool    `json:"optimal,omitempty"`
	Classes        int      `json:"needed_eclasses"`
	EClasses       int      `json:"eclasses"`
	ENodes         int      `json:"enodes"`
	LoadSeconds    float64  `json:"load_seconds"`
	ExtractSeconds float64  `json:"extract_seconds"`
	// Nodes are the chosen nodes, children before parents (--nodes only).
	Nodes []extractNode `json:"nodes,omitempty"`

	load, took time.Duration
}

// extractNode is one chosen e-node, named as the file names it.
type extractNode struct {
	Node   string  `json:"node"`
	EClass string  `json:"eclass"`
	Op     string  `json:"op"`
	Cost   float64 `json:"cost"`
}

// runExtract does the extract command's work.
func runExtract(ctx context.Context, path, algo string, timeout time.Duration, asJSON, listNodes bool, stdout io.Writer) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	start := time.Now()
	p, im, err := extract.FromFile(path)
	if err != nil {
		return fmt.Errorf("load e-graph: %w", err) // the error names the file
	}
	rep := &extractReport{
		File:      path,
		Algorithm: algo,
		EClasses:  im.Graph.NumClasses(),
		ENodes:    im.Graph.NumNodes(),
		load:      time.Since(start),
	}

	ectx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		ectx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	start = time.Now()
	var sol *extract.Solution
	switch algo {
	case algoTree:
		sol, _, err = extract.Tree(ectx, p)
	case algoGreedy:
		sol, _, err = extract.GreedyDAG(ectx, p)
	case algoExact:
		sol, err = runExact(ectx, p, timeout, rep)
	}
	rep.took = time.Since(start)
	if err != nil {
		if ctx.Err() == nil && ectx.Err() != nil {
			return fmt.Errorf("%s extraction of %s: stopped by --timeout %v: %w", algo, path, timeout, err)
		}
		return fmt.Errorf("%s extraction of %s: %w", algo, path, err)
	}
	// Both costs are recomputed from the solution, whatever the algorithm
	// reported, so the two figures always describe the same program.
	if rep.DAGCost, err = sol.DAGCost(p); err == nil {
		rep.TreeCost, err = sol.TreeCost(p)
	}
	if err != nil {
		return fmt.Errorf("%s extraction of %s: %w", algo, path, err)
	}
	order, err := sol.Needed(p)
	if err != nil {
		return fmt.Errorf("%s extraction of %s: %w", algo, path, err)
	}
	rep.Classes = len(order)
	rep.LoadSeconds = rep.load.Seconds()
	rep.ExtractSeconds = rep.took.Seconds()
	if listNodes {
		rep.Nodes = chosenNodes(p, im, sol, order)
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return rep.writeText(stdout)
}

// runExact runs exact extraction from the greedy solution and records its
// bound in rep. The greedy start is cheap next to the solver and often
// already optimal, which the exact search can then prove without a solver.
func runExact(ctx context.Context, p *extract.Problem, timeout time.Duration, rep *extractReport) (*extract.Solution, error) {
	start, _, err := extract.GreedyDAG(ctx, p)
	if err != nil {
		return nil, err
	}
	res, err := extract.Exact(ctx, p, extract.ExactOptions{Timeout: timeout, Start: start})
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
func chosenNodes(p *extract.Problem, im *egraph.Imported, sol *extract.Solution, order []int32) []extractNode {
	out := make([]extractNode, 0, len(order))
	for _, c := range order {
		n := sol.Choice[c]
		id := p.NodeIDs[n]
		name, ok := im.NodeName[id]
		if !ok {
			name = fmt.Sprintf("n%d", id)
		}
		out = append(out, extractNode{
			Node:   name,
			EClass: p.ClassNames[c],
			Op:     im.Graph.Node(id).Op.String(),
			Cost:   p.Nodes[n].Cost,
		})
	}
	return out
}

// writeText prints the report as aligned lines, then the nodes.
func (r *extractReport) writeText(w io.Writer) error {
	dag := [2]string{"dag cost", fmt.Sprint(r.DAGCost)}
	tree := [2]string{"tree cost", fmt.Sprint(r.TreeCost)}
	costs := [][2]string{dag, tree}
	if r.Algorithm == algoTree {
		costs = [][2]string{tree, dag}
	}
	lines := [][2]string{{"file", r.File}, {"algorithm", r.Algorithm}}
	lines = append(lines, costs...)
	if r.LowerBound != nil {
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
		[2]string{"load time", r.load.Round(time.Microsecond).String()},
		[2]string{"time", r.took.Round(time.Microsecond).String()})
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "%-10s %s\n", l[0]+":", l[1])
	}
	if len(r.Nodes) > 0 {
		b.WriteString("nodes (children first):\n")
		for _, n := range r.Nodes {
			fmt.Fprintf(&b, "  %s  e-class %s  op %s  cost %v\n", quoteIfNeeded(n.Node), quoteIfNeeded(n.EClass), n.Op, n.Cost)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
