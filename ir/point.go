package ir

import (
	"context"
	"fmt"
	"slices"
)

// EvalAt evaluates only some elements of g's outputs: the reference for
// checking a large kernel at its real shapes on a sample of its thread
// blocks, where evaluating whole tensors would cost what the model costs.
// want maps an output name (or the name of a state buffer that g updates,
// as Result.States names them) to linear, row-major element indices of that
// value; where an output and an updated state share a name, the name is
// the output's. It returns, per name, the values at those indices in the same
// order, and when opt.Magnitude their magnitudes, as Eval's
// Result.Magnitudes would give them at those indices.
//
// The work scales with the elements asked for, not with the tensors: a
// first pass walks the graph backwards from the wanted elements and finds
// which elements of every node they need (a row of A and a column of B for
// an element of a matmul, the whole reduced extent of a reduction, a row
// of a softmax or a norm, the keys and values a query attends to); a
// second pass computes only those, forwards, keeping each node's elements
// in a sorted sparse form until its last reader is done. Feeds are read in
// place. The semantics are Eval's, through the same per-element and per-row
// rules: results agree with Eval's to rounding (sums may run in another
// order), and magnitudes follow the same rules.
//
// Errors name the graph and the node: an unknown name, an index outside
// its value, a missing or mistyped feed, an index out of range in a
// gather, an integer division by zero, a cancelled ctx.
func EvalAt(ctx context.Context, g *Graph, feeds map[string]*Tensor, want map[string][]int64, opt EvalOptions) (vals, mags map[string][]float64, err error) {
	return evalAt(ctx, g, feeds, want, opt, &pointStats{})
}

// pointStats counts a point evaluation's work, so that tests can check
// that it scales with the elements asked for without timing anything.
type pointStats struct {
	elements int64 // elements computed, over all nodes but leaves
	macs     int64 // multiply-adds of matmul and attention dot products
}

// evalAt is EvalAt, counting its work in stats.
func evalAt(ctx context.Context, g *Graph, feeds map[string]*Tensor, want map[string][]int64, opt EvalOptions, stats *pointStats) (map[string][]float64, map[string][]float64, error) {
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	slices.Sort(names) // the first error reported does not depend on map order
	targets := make([]Value, len(names))
	js := make([][]int64, len(names))
	for i, name := range names {
		v, err := pointTarget(g, name)
		if err != nil {
			return nil, nil, err
		}
		n := g.Nodes[v].Shape.NumElements()
		for p, j := range want[name] {
			if j < 0 || j >= n {
				return nil, nil, fmt.Errorf("eval at %s: %q: index %d (position %d) outside its %d elements %v", g.Name, name, j, p, n, g.Nodes[v].Shape)
			}
		}
		targets[i], js[i] = v, want[name]
	}
	vs, ms, err := evalPoints(ctx, g, feeds, targets, js, opt.Magnitude, stats)
	if err != nil {
		return nil, nil, fmt.Errorf("eval at %s: %w", g.Name, err)
	}
	vals := map[string][]float64{}
	var mags map[string][]float64
	if opt.Magnitude {
		mags = map[string][]float64{}
	}
	for i, name := range names {
		vals[name] = vs[i]
		if mags != nil {
			mags[name] = ms[i]
		}
	}
	return vals, mags, nil
}

// EvalElements computes the elements of value v at indices (each a
// multi-index into v's shape), reading leaves from feeds and computing only
// the elements of other nodes that those need. It is EvalAt for any value
// of g, named by its number rather than by an output's name, without
// magnitudes or a context; it agrees with Eval element for element, to
// rounding. Every leaf g reads must be fed, as for EvalAt.
func EvalElements(g *Graph, feeds map[string]*Tensor, v Value, indices [][]int64) ([]float64, error) {
	if v < 0 || int(v) >= len(g.Nodes) {
		return nil, fmt.Errorf("eval elements of %s: no value %%%d", g.Name, v)
	}
	shape := g.Nodes[v].Shape
	st := shape.Strides()
	js := make([]int64, len(indices))
	for i, idx := range indices {
		if len(idx) != len(shape) {
			return nil, fmt.Errorf("eval elements of %s: index %v for shape %v", g.Name, idx, shape)
		}
		for d, x := range idx {
			if x < 0 || x >= int64(shape[d]) {
				return nil, fmt.Errorf("eval elements of %s: index %v outside shape %v", g.Name, idx, shape)
			}
		}
		js[i] = flatIndex(idx, st)
	}
	vals, _, err := evalPoints(context.Background(), g, feeds, []Value{v}, [][]int64{js}, false, &pointStats{})
	if err != nil {
		return nil, fmt.Errorf("eval elements of %s: %w", g.Name, err)
	}
	return vals[0], nil
}

// evalPoints is the one implementation of point evaluation behind EvalAt
// and EvalElements: it returns, for each value vs[i], its elements at the
// linear indices want[i] (each within the value), and their magnitudes
// when magnitude. Its errors name the node but not the graph.
func evalPoints(ctx context.Context, g *Graph, feeds map[string]*Tensor, vs []Value, want [][]int64, magnitude bool, stats *pointStats) (vals, mags [][]float64, err error) {
	pe := newPointEval(ctx, g, feeds, magnitude, stats)
	keep := make([]bool, len(g.Nodes))
	for i, v := range vs {
		keep[v] = true
		pe.add(v, want[i])
	}
	if err := pe.run(keep); err != nil {
		return nil, nil, err
	}
	vals = make([][]float64, len(vs))
	if magnitude {
		mags = make([][]float64, len(vs))
	}
	for i, v := range vs {
		vals[i] = make([]float64, len(want[i]))
		if mags != nil {
			mags[i] = make([]float64, len(want[i]))
		}
		if len(want[i]) == 0 {
			continue // nothing was computed: v may have no store
		}
		s := pe.store[v]
		for p, j := range want[i] {
			val, m := s.at(j)
			vals[i][p] = val
			if mags != nil {
				mags[i][p] = m
			}
		}
		if s.missing >= 0 {
			return nil, nil, fmt.Errorf("node %%%d: internal error: element %d was not computed", v, s.missing)
		}
	}
	return vals, mags, nil
}

// pointTarget finds the value a name of want stands for: an output, or a
// state buffer's update. An output wins over a state of the same name.
func pointTarget(g *Graph, name string) (Value, error) {
	v := NoValue
	for _, o := range g.Outputs {
		if o.Name == name {
			v = o.Value
			break
		}
	}
	for _, u := range g.Updates {
		if v != NoValue {
			break
		}
		if u.State >= 0 && int(u.State) < len(g.Nodes) && g.Nodes[u.State].Name == name {
			v = u.Value
		}
	}
	if v == NoValue {
		return NoValue, fmt.Errorf("eval at %s: no output or updated state named %q", g.Name, name)
	}
	if v < 0 || int(v) >= len(g.Nodes) {
		return NoValue, fmt.Errorf("eval at %s: %q names no node", g.Name, name)
	}
	return v, nil
}
