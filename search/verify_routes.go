package search

import (
	"context"
	"fmt"
	"math"

	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/ir"
)

// routeTies lets the reference interpreter take a program's choice of
// experts where a route's row is a near tie: a mixture of experts' top k
// is discontinuous, and where the k-th and (k+1)-th logits are closer
// than the error the logits are allowed, a program's other choice is as
// right as the reference's, and everything after it must then match the
// reference evaluated with that choice. Elsewhere the reference keeps its
// own choice, and a program that chose otherwise fails the comparison of
// the results. The program's choice is read from its route launch's
// output, by running the program under the emulation up to that launch:
// the i-th route node of the graph is the i-th route launch of the run.
type routeTies struct {
	ctx      context.Context
	g        *ir.Graph
	c        *compiled
	feeds    map[string]*ir.Tensor
	eps      []float64
	launches map[ir.Value][2]int // route node: its run launch and output buffer
	got      map[ir.Value]*ir.Tensor
	present  map[ir.Value]int64 // a step's route: the rows present
	// ties counts the rows that took the program's choice.
	ties int
}

// newRouteTies pairs g's route nodes with c's route launches; nil when g
// has none or they do not pair one to one (then the reference keeps its
// own choices everywhere).
func newRouteTies(ctx context.Context, g *ir.Graph, c *compiled, feeds map[string]*ir.Tensor) *routeTies {
	var nodes []ir.Value
	for i, n := range g.Nodes {
		if n.Op == ir.OpRoute {
			nodes = append(nodes, ir.Value(i))
		}
	}
	var launches [][2]int
	for i, l := range c.lowered.Run {
		if l.Body != nil && len(l.Body.Outputs) == 1 && l.Body.Node(l.Body.Outputs[0].Value).Op == ir.OpRoute && len(l.Outs) == 1 {
			launches = append(launches, [2]int{i, l.Outs[0]})
		}
	}
	if len(nodes) == 0 || len(nodes) != len(launches) {
		return nil
	}
	t := &routeTies{ctx: ctx, g: g, c: c, feeds: feeds, eps: ir.PathEps(g), launches: map[ir.Value][2]int{}, got: map[ir.Value]*ir.Tensor{}, present: map[ir.Value]int64{}}
	for i, v := range nodes {
		if !c.lowered.Buffers[launches[i][1]].Shape.Equal(g.Node(v).Shape) {
			return nil
		}
		t.launches[v] = launches[i]
	}
	return t
}

// choose is ir.EvalOptions.RouteChoice.
func (t *routeTies) choose(v ir.Value, row int, logits, mags []float64, ref []int) ([]int, error) {
	k := len(ref)
	if k >= len(logits) || mags == nil {
		return nil, nil
	}
	// A step's rows past the tokens present are padding: the program
	// computes nothing there, and they are compared with nothing.
	if l := t.c.lowered.Run[t.launches[v][0]]; l.Rows != nil {
		n, ok := t.present[v]
		if !ok {
			var err error
			if n, err = cuda.RowsPresent(t.c.lowered, l, t.feeds); err != nil {
				return nil, fmt.Errorf("route %%%d: %w", v, err)
			}
			t.present[v] = n
		}
		if int64(row) >= n {
			return nil, nil
		}
	}
	top := ir.TopK(logits, k+1)
	// Each of the two logits may be off by its allowance.
	tol := t.g.Allowance(t.g.Node(v).Inputs[0], t.eps, 1024)
	allow := tol * (mags[top[k-1]] + mags[top[k]])
	margin := logits[top[k-1]] - logits[top[k]]
	if !(margin <= allow) {
		return nil, nil // a clear choice, or NaN logits: the reference's
	}
	w, err := t.kernelWeights(v)
	if err != nil {
		return nil, err
	}
	E := len(logits)
	var choice []int
	chosen := map[int]bool{}
	for e := range E {
		if w.At(int64(row*E+e)) != 0 {
			choice = append(choice, e)
			chosen[e] = true
		}
	}
	// The program's choice must be a top k within the allowance: none of
	// its experts below one it left out by more than that.
	least, most := math.Inf(1), math.Inf(-1)
	for e := range E {
		if chosen[e] {
			least = math.Min(least, logits[e])
		} else {
			most = math.Max(most, logits[e])
		}
	}
	// Fewer than k only where an expert's weight is 0 in f32 (a logit far
	// below the largest, whose exponential underflows): then the
	// reference's weight rounds to 0 too.
	underflow := 0
	refW := make([]float64, E)
	ir.RouteRow(t.g.Node(v).Gating, logits, nil, ref, refW, nil)
	for _, e := range ref {
		if float32(refW[e]) == 0 {
			underflow++
		}
	}
	if len(choice) > k || len(choice) < k-underflow || most-least > allow {
		return nil, fmt.Errorf("route %%%d row %d: the program chose experts %v, not a top %d of the logits within their allowance %.3g", v, row, choice, k, allow)
	}
	t.ties++
	return choice, nil
}

// kernelWeights is the output of route node v's launch, run under the
// emulation (once).
func (t *routeTies) kernelWeights(v ir.Value) (*ir.Tensor, error) {
	if w, ok := t.got[v]; ok {
		return w, nil
	}
	l := t.launches[v]
	w, err := cuda.EmulateRunUntil(t.ctx, t.c.lowered, t.c.kernels, t.feeds, l[0], l[1], emu.Options{})
	if err != nil {
		return nil, fmt.Errorf("route %%%d: the program's choices: %w", v, err)
	}
	t.got[v] = w
	return w, nil
}
