package search

import (
	"context"
	"fmt"
	"math"

	"github.com/lumsearch/lumsearch/ir"
)

// benchReferenceElements bounds the intermediates of a model whose
// reference bench evaluates to compare with an outputs file, as the
// verifier bounds a whole program it emulates.
const benchReferenceElements = 16 << 20

// checkBenchOutputs compares the compiled program's results (t.outputs:
// outputs by name, states as "state NAME") with an outputs file. A model
// small enough for the reference interpreter is evaluated on the same
// feeds for its magnitudes, and every element compares within the
// verifier's allowance (compareOutputs); a larger one compares each value
// whole, in the relative L2 sense, within the verifier's bound for the
// roundings on its path.
func checkBenchOutputs(ctx context.Context, s *benchSetup, feeds map[string]*ir.Tensor, t *benchTimes, e *expectation) error {
	got := map[string]*ir.Tensor{}
	for _, r := range resultValues(s.g) {
		key := r.name
		if !r.output {
			key = "state " + r.name
		}
		if v, ok := t.outputs[key]; ok {
			got[r.key()] = v
		}
	}
	if s.opt.lp.TempBytes/4 <= benchReferenceElements {
		ref, err := ir.Eval(ctx, s.g, feeds, ir.EvalOptions{Magnitude: true})
		if err != nil {
			return fmt.Errorf("the reference for --outputs: %w", err)
		}
		e.found, err = compareOutputs(s.g, e.file, got, e.want, ref.Magnitudes)
		return err
	}
	eps := ir.PathEps(s.g)
	c := &OutputsCheck{File: e.file, RelativeL2: true, Limit: 1}
	for _, r := range resultValues(s.g) {
		w, ok := e.want[r.key()]
		if !ok {
			continue
		}
		g := got[r.key()]
		if g == nil {
			return fmt.Errorf("%s: the compiled program gave no %s to compare with", e.file, r.key())
		}
		rel, err := relativeL2(g, w)
		if err != nil {
			return fmt.Errorf("%s differs from %s: %w", r.key(), e.file, err)
		}
		limit := relativeLimit(max(eps[r.value], s.g.Node(r.value).DType.Eps()))
		if rel > limit {
			return fmt.Errorf("%s differs from %s: relative L2 error %.3g, at most %.3g", r.key(), e.file, rel, limit)
		}
		c.Values++
		c.Elements += w.Len()
		c.Worst, c.Limit = max(c.Worst, rel), min(c.Limit, limit)
	}
	e.found = c
	return nil
}

// relativeL2 is how far got is from want in units of want's size,
// sqrt(Σ(got-want)² / Σwant²), over the elements where both are finite.
// Elsewhere they must agree: NaN with NaN, an infinity with the same one,
// each compared as got's dtype holds it (ir.OverflowTo), so that a value
// of want beyond the dtype's finite range is its infinity.
func relativeL2(got, want *ir.Tensor) (float64, error) {
	if !got.Shape.Equal(want.Shape) {
		return 0, fmt.Errorf("shapes %v and %v differ", got.Shape, want.Shape)
	}
	var diff2, norm2 float64
	for i := range want.Len() {
		g, w := ir.OverflowTo(got.DType, got.At(i)), ir.OverflowTo(got.DType, want.At(i))
		finite := !math.IsNaN(g) && !math.IsInf(g, 0)
		if finite != (!math.IsNaN(w) && !math.IsInf(w, 0)) || (!finite && g != w && !(math.IsNaN(g) && math.IsNaN(w))) {
			return 0, fmt.Errorf("element %d is %v, the file's %v", i, g, w)
		}
		if finite {
			diff2 += (g - w) * (g - w)
			norm2 += w * w
		}
	}
	return math.Sqrt(diff2 / math.Max(norm2, math.SmallestNonzeroFloat64)), nil
}
