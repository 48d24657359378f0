package cuda

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/rules"
)

// bodyDraw draws random kernel bodies: a form's skeleton (an elementwise
// chain, a row operation, a matmul, attention in its eager form or as the
// op, or anything at all) with random dtypes, odd extents, and random
// prologues and epilogues of elementwise ops, casts and views around it.
// Most draws are what fusion builds; the rest probe the forms' edges
// (reductions across rows, half-precision rows in a matmul prologue, a
// where between softmax and the second matmul, views after a product).
type bodyDraw struct {
	rng *rand.Rand
	b   *ir.Builder
	ins int
}

// input makes a fresh kernel argument.
func (d *bodyDraw) input(dt ir.DType, shape ir.Shape) ir.Value {
	v := d.b.Input(fmt.Sprintf("$%d", d.ins), dt, shape...)
	d.ins++
	return v
}

func (d *bodyDraw) pick(n int) int { return d.rng.IntN(n) }

func (d *bodyDraw) floatType() ir.DType {
	return []ir.DType{ir.F32, ir.F32, ir.F16, ir.BF16}[d.pick(4)]
}

func (d *bodyDraw) dim() ir.Dim { return ir.Dim(1 + d.pick(9)) }

// chain applies up to n random elementwise steps to x, keeping its shape
// and dtype: a unary op, an op with a fresh argument (whole, or a row or
// column broadcast), a select, a cast round trip.
func (d *bodyDraw) chain(x ir.Value, n int) ir.Value {
	b := d.b
	for range d.pick(n + 1) {
		s, dt := b.Shape(x), b.DType(x)
		switch k := d.pick(7); {
		case k == 0 && dt.IsFloat():
			x = b.Unary([]ir.Op{ir.OpTanh, ir.OpSigmoid, ir.OpNeg, ir.OpAbs, ir.OpRelu, ir.OpSin, ir.OpErf}[d.pick(7)], x)
		case k == 1:
			x = b.Binary([]ir.Op{ir.OpAdd, ir.OpMul, ir.OpSub, ir.OpMax}[d.pick(4)], x, d.input(dt, s))
		case k == 2 && len(s) > 0:
			row := s.Clone()
			row[d.pick(len(s))] = 1
			x = b.Binary([]ir.Op{ir.OpAdd, ir.OpMul}[d.pick(2)], x, b.BroadcastTo(d.input(dt, row), s))
		case k == 3:
			// Against zero, whose side no rounding changes: a value
			// near a random threshold would take either branch.
			x = b.Where(b.Binary(ir.OpGt, x, b.BroadcastTo(b.Scalar(dt, 0), s)), x, d.input(dt, s))
		case k == 4 && dt.IsFloat():
			x = b.Cast(b.Cast(x, d.floatType()), dt)
		case k == 5 && dt.IsFloat():
			x = b.Mul(x, b.Scalar(dt, 0.5))
		}
	}
	return x
}

// view applies a random view that keeps the shape's rank (or none).
func (d *bodyDraw) view(x ir.Value) ir.Value {
	b := d.b
	s := b.Shape(x)
	if len(s) < 2 {
		return x
	}
	switch d.pick(6) {
	case 0:
		perm := make([]int, len(s))
		for i := range perm {
			perm[i] = i
		}
		i, j := d.pick(len(s)), d.pick(len(s))
		perm[i], perm[j] = perm[j], perm[i]
		return b.Permute(x, perm...)
	case 1:
		ax := d.pick(len(s))
		if s[ax] > 2 {
			return b.Slice(x, ax, 1, int64(s[ax]), 1)
		}
	case 2:
		before, after := make([]int64, len(s)), make([]int64, len(s))
		before[d.pick(len(s))] = 1
		return b.Pad(x, before, after, 0)
	case 3:
		ax := d.pick(len(s))
		other := s.Clone()
		other[ax] = 2
		return b.Concat(ax, x, d.input(b.DType(x), other))
	}
	return x
}

// elementwise draws a chain over views of arguments, sometimes through a
// gather or a sum across rows.
func (d *bodyDraw) elementwise() ir.Value {
	dt := []ir.DType{ir.F32, ir.F16, ir.BF16, ir.I32, ir.I64}[d.pick(5)]
	s := ir.Shape{d.dim(), d.dim()}
	var x ir.Value
	switch d.pick(3) {
	case 0:
		x = d.b.Gather(d.input(dt, ir.Shape{7, s[1]}), d.input(ir.I64, ir.Shape{s[0]}), 0)
	case 1:
		x = d.b.Reshape(d.b.Sum(d.input(dt, ir.Shape{1 + ir.Dim(d.pick(4)), s[0], s[1]}), 0), s...)
	default:
		x = d.input(dt, s)
	}
	return d.chain(d.view(d.chain(x, 2)), 3)
}

// rowOp draws a row operation (a reduction, softmax or a norm, along the
// last axis or another) over a prologue, its statistics used by an
// epilogue.
func (d *bodyDraw) rowOp(dt ir.DType, s ir.Shape) ir.Value {
	b := d.b
	x := d.chain(d.input(dt, s), 2)
	last := len(s) - 1
	axis := last
	if d.pick(4) == 0 {
		axis = d.pick(len(s))
	}
	switch d.pick(5) {
	case 0:
		return b.Softmax(x, axis)
	case 1:
		return b.RMSNorm(x, d.input(dt, s[last:]), 1e-5)
	case 2:
		return b.LayerNorm(x, d.input(dt, s[last:]), d.input(dt, s[last:]), 1e-5)
	case 3:
		return b.Sub(x, b.BroadcastTo(b.ReduceMax(x, axis), s))
	}
	return b.Mul(x, b.BroadcastTo(b.Rsqrt(b.Add(b.Sum(b.Mul(x, x), axis), b.BroadcastTo(b.Scalar(dt, 1), reducedAt(s, axis)))), s))
}

func reducedAt(s ir.Shape, axis int) ir.Shape {
	r := s.Clone()
	r[axis] = 1
	return r
}

// row draws a row kernel, sometimes writing its prologue's value too.
func (d *bodyDraw) row() []ir.Value {
	dt := d.floatType()
	if d.pick(5) == 0 {
		dt = []ir.DType{ir.I32, ir.I64}[d.pick(2)]
		x := d.input(dt, ir.Shape{d.dim(), d.dim()})
		return []ir.Value{d.chain(d.b.BroadcastTo(d.b.ReduceMax(x, 1), d.b.Shape(x)), 2)}
	}
	s := ir.Shape{d.dim(), d.dim(), ir.Dim(1 + d.pick(70))}[3-2-d.pick(2):]
	y := d.chain(d.rowOp(dt, s), 2)
	if d.pick(4) == 0 {
		y = d.view(y)
	}
	return []ir.Value{y}
}

// matmul draws a matmul with prologues on its operands (a norm on the
// left one, sometimes in half precision) and an epilogue.
func (d *bodyDraw) matmul() ir.Value {
	b := d.b
	dt := d.floatType()
	M, K, N := d.dim(), ir.Dim(1+d.pick(40)), d.dim()
	var a ir.Value
	if d.pick(3) == 0 {
		a = d.rowOp(dt, ir.Shape{M, K})
	} else {
		a = d.chain(d.input(dt, ir.Shape{M, K}), 2)
	}
	w := d.chain(d.input(dt, ir.Shape{K, N}), 1)
	if d.pick(4) == 0 {
		w = b.Transpose(d.input(dt, ir.Shape{N, K}), 0, 1)
	}
	var y ir.Value
	if dt != ir.F32 && d.pick(3) == 0 {
		y = b.Apply(ir.OpMatMul, ir.Attrs{DType: ir.F32}, a, w)
	} else {
		y = b.MatMul(a, w)
	}
	y = d.chain(y, 3)
	if d.pick(3) == 0 {
		y = d.view(y)
	}
	return y
}

// attention draws softmax(q k^T * scale + mask) v in its eager form, with
// rotary-like prologues, grouped heads, half-precision probabilities and
// an epilogue; or the attention op itself.
func (d *bodyDraw) attention() ir.Value {
	b := d.b
	dt := d.floatType()
	B, H, S, T, D := ir.Dim(1+d.pick(2)), ir.Dim(1+d.pick(2)), d.dim(), ir.Dim(1+d.pick(40)), ir.Dim(4*(1+d.pick(4)))
	group := ir.Dim(1 + d.pick(2))
	q := d.chain(d.input(dt, ir.Shape{B, H * group, S, D}), 2)
	k := d.chain(d.input(dt, ir.Shape{B, H, T, D}), 1)
	v := d.input(dt, ir.Shape{B, H, T, D})
	if d.pick(3) == 0 {
		return d.chain(b.Attention(q, k, v, 0.3, d.pick(2) == 0, int64(d.pick(3))), 2)
	}
	if group > 1 {
		k, v = repeatHeads(b, k, group), repeatHeads(b, v, group)
	}
	s := b.Mul(b.MatMul(q, b.Transpose(k, 2, 3)), b.Scalar(dt, 0.3))
	if d.pick(2) == 0 {
		s = b.Add(s, b.BroadcastTo(d.input(dt, ir.Shape{1, 1, S, T}), b.Shape(s)))
	}
	var p ir.Value
	switch d.pick(3) {
	case 0:
		x := b.Cast(s, ir.F32)
		e := b.Exp(b.Sub(x, b.BroadcastTo(b.ReduceMax(x, 3), b.Shape(x))))
		p = b.Cast(b.Div(e, b.BroadcastTo(b.Sum(e, 3), b.Shape(e))), dt)
	case 1:
		// A row whose keys are all masked is NaN in ONNX: a where after
		// the softmax, which no attention kernel computes.
		p = b.Where(b.Binary(ir.OpGt, s, d.input(dt, b.Shape(s))), b.Softmax(s, 3), b.Scalar(dt, 0))
	default:
		p = b.Softmax(s, 3)
	}
	y := b.MatMul(p, v)
	if d.pick(2) == 0 {
		y = b.Reshape(b.Permute(y, 0, 2, 1, 3), B, S, H*group*D)
	}
	return d.chain(y, 1)
}

func repeatHeads(b *ir.Builder, x ir.Value, n ir.Dim) ir.Value {
	s := b.Shape(x)
	return b.Reshape(b.Expand(b.Reshape(x, s[0], s[1], 1, s[2], s[3]), s[0], s[1], n, s[2], s[3]), s[0], s[1]*n, s[2], s[3])
}

// anything draws a small random graph from every kind of step above.
func (d *bodyDraw) anything() []ir.Value {
	b := d.b
	dt := d.floatType()
	s := ir.Shape{d.dim(), d.dim()}
	x := d.input(dt, s)
	for range 1 + d.pick(4) {
		switch d.pick(5) {
		case 0:
			x = b.BroadcastTo(b.Apply([]ir.Op{ir.OpSum, ir.OpMaxReduce}[d.pick(2)], ir.Attrs{Axis: d.pick(2)}, x), s)
		case 1:
			x = b.Softmax(x, d.pick(2))
		case 2:
			x = b.MatMul(x, d.input(dt, ir.Shape{s[1], s[1]}))
		case 3:
			x = d.view(x)
			s = b.Shape(x)
		default:
			x = d.chain(x, 2)
		}
	}
	outs := []ir.Value{x}
	if d.pick(4) == 0 {
		outs = append(outs, d.chain(d.input(dt, s), 1))
	}
	return outs
}

// draw builds one random body; ok is false when the draw's steps do not
// fit together (the builder refused one).
func drawBody(rng *rand.Rand, i int) (*ir.Graph, bool) {
	d := &bodyDraw{rng: rng, b: ir.NewBuilder(fmt.Sprintf("draw%d", i))}
	var outs []ir.Value
	switch d.pick(6) {
	case 0:
		outs = []ir.Value{d.elementwise()}
	case 1:
		outs = d.row()
	case 2:
		outs = []ir.Value{d.matmul()}
	case 3:
		outs = []ir.Value{d.attention()}
	case 4:
		outs = d.anything()
	default:
		outs = []ir.Value{d.elementwise(), d.elementwise()}[:1+d.pick(2)]
	}
	for j, o := range outs {
		d.b.Output(fmt.Sprintf("out%d", j), o)
	}
	g, err := d.b.Build()
	if err != nil {
		return nil, false
	}
	canon, _, err := ir.Canonical(g)
	if err != nil {
		return nil, false
	}
	return canon, true
}

// TestRandomLegalBodiesPrintInEverySchedule draws random kernel bodies
// (a fixed seed) and holds every one rules.Legal admits to the oracle's
// promise: cost.FormOf names its form, the cost model ranks its
// schedules, and the printer prints it in every one of them. A sample of
// them, in its best schedule and in one other, compiles with NVRTC and
// runs under the emulation against the reference interpreter. The draws
// must reach every form.
func TestRandomLegalBodiesPrintInEverySchedule(t *testing.T) {
	// Parallel: independent of the other tests, it shares the machine's
	// cores with them once the sequential tests are done.
	t.Parallel()
	const draws, sampled = 1500, 48
	dev, err := cost.LookupDevice("h100")
	require.NoError(t, err)
	model := cost.NewModel(dev, cost.Defaults(dev))
	rng := rand.New(rand.NewPCG(20, 3))
	sample := rand.New(rand.NewPCG(7, 1)) // which bodies run, apart from the draws
	forms := map[cost.Form]int{}
	refused := map[string]int{}
	legal, schedules := 0, 0
	var kernels []*Kernel
	var bodies []*ir.Graph
	for i := range draws {
		body, ok := drawBody(rng, i)
		if !ok {
			continue
		}
		if !rules.Legal(body) {
			if _, err := cost.FormOf(body); err != nil {
				refused[firstWords(err.Error(), 6)]++
			}
			continue
		}
		legal++
		form, err := cost.FormOf(body)
		require.NoError(t, err, "Legal admitted a body no form prints:\n%s", body)
		forms[form]++
		ranked, err := model.Ranked(body)
		require.NoError(t, err, "%s", body)
		run, other := len(kernels) < 2*sampled && sample.IntN(8) == 0, sample.IntN(len(ranked))
		for j, e := range ranked {
			k, err := PrintKernelWith(fmt.Sprintf("d%d_%d", i, j), "", body, e.Schedule)
			require.NoError(t, err, "schedule %s of\n%s", e.Schedule, body)
			schedules++
			if run && (j == 0 || j == other) {
				kernels, bodies = append(kernels, k), append(bodies, body)
			}
		}
	}
	var why []string
	for _, m := range sortedNames(refused) {
		why = append(why, fmt.Sprintf("%d x %s", refused[m], m))
	}
	t.Logf("%d draws, %d legal bodies, %d schedules printed; forms %v; Legal refused for the printer's reasons:\n%s",
		draws, legal, schedules, forms, strings.Join(why, "\n"))
	for _, f := range []cost.Form{cost.FormElementwise, cost.FormRow, cost.FormMatMul, cost.FormAttention} {
		assert.GreaterOrEqual(t, forms[f], 20, "too few legal %s bodies drawn", f)
	}
	if lib, err := nvrtc.Load(); err == nil {
		compiled := kernels
		if testing.Short() {
			// Their best schedules' (the long test command compiles the
			// others too).
			compiled = slices.DeleteFunc(slices.Clone(kernels), func(k *Kernel) bool { return !strings.HasSuffix(k.Name, "_0") })
		}
		_, err := lib.Compile(context.Background(), NVRTCPrelude+Source(compiled), "kernels.cu", nvrtc.Options{Arch: "sm_90"})
		require.NoError(t, err, "NVRTC compiles the sampled kernels")
	}
	if _, err := exec.LookPath("g++"); err != nil {
		return
	}
	args, outs, wants := referenceRuns(t, bodies, 40)
	got, err := Emulate(context.Background(), kernels, args, outs, emu.Options{Shuffle: true, Seed: 9})
	require.NoError(t, err)
	for i, k := range kernels {
		for j := range bodies[i].Outputs {
			mm := compareOutput(t, bodies[i], j, got[i][j], wants[i])
			assert.Nil(t, mm, "%s (%s) output %d: %v\n%s\n%s", k.Name, k.Schedule, j, mm, bodies[i], k.Text)
		}
	}
}

// firstWords is the first n words of s, to group messages that differ in
// their shapes only.
func firstWords(s string, n int) string {
	f := strings.Fields(s)
	return strings.Join(f[:min(n, len(f))], " ")
}
