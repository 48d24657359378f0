package cuda

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/ir"
)

// check compares a plan's outputs with the reference.
func (p *verifyPlan) check(ctx context.Context) (*KernelCheck, error) {
	c := &KernelCheck{Kernel: p.k.Name, GridBlocks: p.grid, BlocksRun: p.grid, Reduction: p.reduction}
	if p.blocks != nil {
		c.Sampled, c.Blocks, c.BlocksRun = true, p.blocks, len(p.blocks)
		return c, p.checkSample(ctx, c)
	}
	return c, p.checkWhole(ctx, c)
}

// checkWhole compares every output element of a run of every block.
func (p *verifyPlan) checkWhole(ctx context.Context, c *KernelCheck) error {
	want, err := ir.Eval(ctx, p.body, p.feeds, ir.EvalOptions{Magnitude: true})
	if err != nil {
		return fmt.Errorf("verify kernel %s: the reference: %w", p.k.Name, err)
	}
	p.ref = &planRef{want: want.Outputs, mag: want.Magnitudes}
	for j, o := range p.body.Outputs {
		vt, raw := p.outs[j], p.got[j]
		w, mag := want.Outputs[o.Name], want.Magnitudes[o.Name]
		size := vt.DType.Size()
		skipped := map[int64]bool{}
		if j < len(p.skipped) {
			for _, i := range p.skipped[j] {
				skipped[i] = true
			}
		}
		var never, firstNever int64 = 0, -1
		for i := range w.Len() {
			if !skipped[i] && emu.Unwritten(raw, int(i)*size, size) {
				if never == 0 {
					firstNever = i
				}
				never++
			}
		}
		if never > 0 {
			c.Mismatch = p.mismatch(j, firstNever, math.NaN(), w.At(firstNever), mag.At(firstNever), 0)
			c.Mismatch.NeverWritten = never
			c.WorstRatio = math.Inf(1)
			return c.Mismatch
		}
		got, err := DecodeTensor(vt, raw)
		if err != nil {
			return fmt.Errorf("verify kernel %s: %w", p.k.Name, err)
		}
		// An element the kernel must not write compares with nothing:
		// it takes the reference's value.
		for i := range skipped {
			got.Set(i, w.At(i))
		}
		c.Elements += w.Len() - int64(len(skipped))
		tol := p.tolerance(j)
		for i := range w.Len() {
			if !skipped[i] {
				c.WorstRatio = math.Max(c.WorstRatio, errorRatio(got.DType, got.At(i), w.At(i), mag.At(i), tol))
			}
		}
		mm, err := ir.CompareWithin(got, w, mag, tol)
		if err != nil {
			return fmt.Errorf("verify kernel %s: output %s: %w", p.k.Name, o.Name, err)
		}
		if mm != nil {
			c.Mismatch = p.mismatch(j, mm.Index, mm.Got, mm.Want, mm.Magnitude, mm.Allowed)
			return c.Mismatch
		}
	}
	return nil
}

// checkSample compares the output elements a sampled run wrote with the
// reference computed at those elements only.
func (p *verifyPlan) checkSample(ctx context.Context, c *KernelCheck) error {
	written := map[string][]int64{}
	var total int64
	for j, o := range p.body.Outputs {
		vt, raw := p.outs[j], p.got[j]
		size := vt.DType.Size()
		var idx []int64
		for i := range vt.Shape.NumElements() {
			if !emu.Unwritten(raw, int(i)*size, size) {
				idx = append(idx, i)
			}
		}
		if len(idx) > 0 {
			written[o.Name] = idx
			total += int64(len(idx))
		}
	}
	if total == 0 {
		return fmt.Errorf("verify kernel %s: the sampled blocks %v of %d wrote no output element", p.k.Name, p.blocks, p.grid)
	}
	if p.maxCompare > 0 && total > int64(p.maxCompare) {
		// Keep a seeded sample, each output in proportion to what it
		// wrote, its first and last written elements always in.
		rng := rand.New(rand.NewPCG(p.seed, 0xc0c0))
		for name, idx := range written {
			keep := max(2, int(int64(p.maxCompare)*int64(len(idx))/total))
			if keep >= len(idx) {
				continue
			}
			picked := map[int]bool{0: true, len(idx) - 1: true}
			for len(picked) < keep {
				picked[rng.IntN(len(idx))] = true
			}
			sub := make([]int64, 0, keep)
			for n, i := range idx {
				if picked[n] {
					sub = append(sub, i)
				}
			}
			written[name] = sub
		}
	}
	vals, mags, err := ir.EvalAt(ctx, p.body, p.feeds, written, ir.EvalOptions{Magnitude: true})
	if err != nil {
		return fmt.Errorf("verify kernel %s: the reference at the sampled elements: %w", p.k.Name, err)
	}
	p.ref = &planRef{idx: written, vals: vals, mags: mags}
	for j, o := range p.body.Outputs {
		idx := written[o.Name]
		if len(idx) == 0 {
			continue
		}
		vt := p.outs[j]
		wv, mv := vals[o.Name], mags[o.Name]
		if len(wv) != len(idx) || len(mv) != len(idx) {
			return fmt.Errorf("verify kernel %s: the reference gave %d values and %d magnitudes of output %s for %d elements",
				p.k.Name, len(wv), len(mv), o.Name, len(idx))
		}
		gv := make([]float64, len(idx))
		size := vt.DType.Size()
		for n, i := range idx {
			gv[n] = element(vt.DType, p.got[j][int(i)*size:])
		}
		shape := ir.Shape{ir.Dim(len(idx))}
		got, err := ir.TensorOf(vt.DType, shape, gv...)
		if err != nil {
			return fmt.Errorf("verify kernel %s: %w", p.k.Name, err)
		}
		want := &ir.Tensor{DType: vt.DType, Shape: shape, F64: wv}
		mag := &ir.Tensor{DType: vt.DType, Shape: shape, F64: mv}
		c.Elements += int64(len(idx))
		tol := p.tolerance(j)
		for n := range idx {
			c.WorstRatio = math.Max(c.WorstRatio, errorRatio(vt.DType, gv[n], wv[n], mv[n], tol))
		}
		mm, err := ir.CompareWithin(got, want, mag, tol)
		if err != nil {
			return fmt.Errorf("verify kernel %s: output %s: %w", p.k.Name, o.Name, err)
		}
		if mm != nil {
			c.Mismatch = p.mismatch(j, idx[mm.Index], mm.Got, mm.Want, mm.Magnitude, mm.Allowed)
			return c.Mismatch
		}
	}
	return nil
}

// tolerance is the relative error output j may have: the allowance of
// its path through the body (ir.PathEps: the body's values are the
// model's, since the rewrites keep partial accumulations in f32).
func (p *verifyPlan) tolerance(j int) float64 {
	return p.body.Allowance(p.body.Outputs[j].Value, ir.PathEps(p.body), p.reduction)
}

func (p *verifyPlan) mismatch(out int, i int64, got, want, mag, allowed float64) *KernelMismatch {
	shape := p.outs[out].Shape
	return &KernelMismatch{
		Kernel: p.k.Name, Output: p.body.Outputs[out].Name, Param: p.k.Params[p.k.Inputs+out].Name,
		Index: i, At: unravel(i, shape), Shape: shape, DType: p.outs[out].DType,
		Got: got, Want: want, Magnitude: mag, Allowed: allowed,
	}
}

// errorRatio is |got - want| over the error ir.Compare allows for the
// element: 0 when equal, +Inf where no error is allowed.
func errorRatio(dt ir.DType, got, want, mag, tol float64) float64 {
	want = ir.OverflowTo(dt, want)
	switch {
	case math.IsNaN(got) || math.IsNaN(want):
		if math.IsNaN(got) == math.IsNaN(want) {
			return 0
		}
		return math.Inf(1)
	case math.IsInf(got, 0) || math.IsInf(want, 0):
		if got == want {
			return 0
		}
		return math.Inf(1)
	}
	d := math.Abs(got - want)
	if d == 0 {
		return 0
	}
	if tol <= 0 {
		return math.Inf(1)
	}
	return d / allowance(dt, want, mag, tol)
}

// element decodes the value at the start of b as a dt.
func element(dt ir.DType, b []byte) float64 {
	t, err := DecodeTensor(ir.ValueType{Shape: ir.Shape{1}, DType: dt}, b[:dt.Size()])
	if err != nil {
		return math.NaN()
	}
	return t.At(0)
}

// unravel turns a row-major index into an index per axis.
func unravel(i int64, shape ir.Shape) []int64 {
	at := make([]int64, len(shape))
	for d := len(shape) - 1; d >= 0; d-- {
		if n := int64(shape[d]); n > 0 {
			at[d] = i % n
			i /= n
		}
	}
	return at
}

// ReductionLength is the longest sum the body computes: a reduced axis, a
// matmul's inner extent, a softmax or norm row, an attention's keys or
// head dimension (max reductions are exact and do not count).
func ReductionLength(body *ir.Graph) int {
	r := 1
	for _, n := range body.Nodes {
		var l ir.Dim
		in := func(k int) ir.Shape { return body.Node(n.Inputs[k]).Shape }
		switch n.Op {
		case ir.OpSum, ir.OpSoftmax:
			s := in(0)
			ax := n.Axis
			if ax < 0 {
				ax += len(s)
			}
			if ax >= 0 && ax < len(s) {
				l = s[ax]
			}
		case ir.OpMatMul, ir.OpLayerNorm, ir.OpRMSNorm:
			if s := in(0); len(s) > 0 {
				l = s[len(s)-1]
			}
		case ir.OpAttention:
			if s := in(1); len(s) == 4 {
				l = max(s[2], s[3])
			}
		case ir.OpRoute:
			// The softmax's sum over the experts (all of them, or k).
			l = in(0)[1]
		case ir.OpExpertsUp, ir.OpExpertsDown:
			// The dot products' length: hidden, or intermediate.
			l = in(0)[len(in(0))-1]
		case ir.OpPagedAttention:
			// A token attends at most a table row's positions.
			if s, k := in(5), in(1); len(s) == 2 && len(k) == 3 {
				l = max(s[1]*ir.Dim(n.Block), k[2])
			}
		}
		r = max(r, int(l))
	}
	return r
}
