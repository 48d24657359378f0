package ir

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pointCases are hand-built graphs for EvalAt: every op class, the
// composite ops along every kind of axis, and the index arithmetic of the
// views and data movement, each small enough for Eval to check whole.
var pointCases = []textCase{
	{"elementwise chain", func(b *Builder) {
		x, y := b.Input("x", F32, 3, 5), b.Input("y", F32, 5) // y broadcasts
		s := b.Add(b.Mul(x, y), b.Tanh(x))
		b.Output("out", b.Where(b.Binary(OpGt, s, b.Scalar(F32, 0)), b.Exp(b.Neg(s)), b.Div(s, b.Add(b.Abs(y), b.Scalar(F32, 1)))))
		b.Output("minmax", b.Max(b.Min(x, y), b.Sigmoid(x)))
	}},
	{"softmax last axis", func(b *Builder) {
		b.Output("out", b.Softmax(b.Input("x", F32, 2, 3, 7), -1))
	}},
	{"softmax middle axis", func(b *Builder) {
		b.Output("out", b.Softmax(b.Input("x", F32, 2, 5, 3), 1))
	}},
	{"softmax first axis", func(b *Builder) {
		b.Output("out", b.Softmax(b.Input("x", F32, 4, 3), 0))
	}},
	{"layer norm", func(b *Builder) {
		x := b.Input("x", F32, 2, 3, 8)
		b.Output("out", b.LayerNorm(b.Mul(x, x), b.Weight("g", F32, 8), b.Weight("b", F32, 8), 1e-5))
	}},
	{"rms norm", func(b *Builder) {
		b.Output("out", b.RMSNorm(b.Input("x", F32, 5, 16), b.Weight("g", F32, 16), 1e-6))
	}},
	{"attention causal gqa", func(b *Builder) {
		q := b.Input("q", F32, 2, 4, 3, 8)
		k, v := b.Input("k", F32, 2, 2, 6, 8), b.Input("v", F32, 2, 2, 6, 8)
		b.Output("out", b.Attention(q, k, v, 1/math.Sqrt(8), true, 3))
		b.Output("full", b.Attention(b.Neg(q), k, b.Exp(v), 0.5, false, 0))
	}},
	{"paged attention gqa window", func(b *Builder) {
		q, k, v := b.Input("q", F32, 9, 4, 8), b.Input("k", F32, 9, 2, 8), b.Input("v", F32, 9, 2, 8)
		kp, vp := b.Input("kpool", F32, 24, 2, 8), b.Input("vpool", F32, 24, 2, 8)
		meta := []Value{b.Input("table", I32, 3, 5), b.Input("lens", I32, 3), b.Input("starts", I32, 4), b.Input("seqs", I32)}
		b.Output("out", b.PagedAttention(q, k, v, kp, vp, meta[0], meta[1], meta[2], meta[3], 0.4, 4, 6))
		// Computed operands: the reference computes only the rows read.
		b.Output("computed", b.PagedAttention(b.Neg(q), k, v, b.Exp(kp), vp, meta[0], meta[1], meta[2], meta[3], 0.3, 4, 0))
		// Sinks, a leaf and computed.
		sinks := b.Input("sinks", F32, 4)
		b.Output("sinks", b.PagedAttentionSinks(q, k, v, kp, vp, meta[0], meta[1], meta[2], meta[3], sinks, 0.4, 4, 6))
		b.Output("sinks_computed", b.PagedAttentionSinks(q, k, v, kp, vp, meta[0], meta[1], meta[2], meta[3], b.Neg(sinks), 0.3, 4, 0))
	}},
	{"attention decomposed with mask and gqa broadcast", func(b *Builder) {
		q := b.Input("q", F32, 1, 4, 5, 8)
		k, v := b.Input("k", F32, 1, 2, 5, 8), b.Input("v", F32, 1, 2, 5, 8)
		rep := func(x Value) Value { // repeat_kv
			return b.Reshape(b.Expand(b.Reshape(x, 1, 2, 1, 5, 8), 1, 2, 2, 5, 8), 1, 4, 5, 8)
		}
		s := b.Mul(b.MatMul(q, b.Transpose(rep(k), 2, 3)), b.Scalar(F32, F32.Round(1/math.Sqrt(8))))
		see := b.Binary(OpGe, b.Iota(I64, Shape{5, 5}, 0), b.Iota(I64, Shape{5, 5}, 1))
		mask := b.Where(see, b.Scalar(F32, 0), b.Scalar(F32, -math.MaxFloat32))
		s = b.Add(s, mask)
		ex := b.Exp(b.Sub(s, b.ReduceMax(s, -1)))
		b.Output("out", b.MatMul(b.Div(ex, b.Sum(ex, -1)), rep(v)))
	}},
	{"matmul batch broadcast", func(b *Builder) {
		a := b.Input("a", F32, 2, 1, 3, 4)
		c := b.Input("c", F32, 5, 4, 6)
		b.Output("out", b.MatMul(a, c))
		b.Output("weight", b.MatMul(b.Reshape(a, 6, 4), b.Transpose(b.Weight("w", F32, 7, 4), 0, 1)))
	}},
	{"gather negative and computed indices", func(b *Builder) {
		table := b.Weight("table", F32, 6, 4)
		b.Output("neg", b.Gather(table, b.Const(I64, Shape{2, 2}, -1, 2, -6, 0), 0))
		// Indices computed from an input: the backward pass has to
		// evaluate them before it knows which rows are read.
		ids := b.Input("ids", I64, 3)
		idx := b.Sub(b.Binary(OpMod, b.Abs(ids), b.Scalar(I64, 6)), b.Scalar(I64, 3))
		b.Output("computed", b.Exp(b.Gather(b.Tanh(table), idx, 0)))
		b.Output("axis1", b.Gather(b.Input("x", F32, 2, 5, 3), b.Const(I32, Shape{4}, 4, -5, 1, -1), 1))
	}},
	{"pad concat slice", func(b *Builder) {
		x := b.Input("x", F32, 2, 3, 4)
		p := b.Pad(b.Exp(x), []int64{1, 0, 2}, []int64{0, 2, 1}, -0.5)
		b.Output("pad", p)
		c := b.Concat(1, b.Neg(x), b.Slice(b.Unary(OpSin, x), 1, 0, 3, 2), x)
		b.Output("concat", c)
		b.Output("strided", b.Slice(b.Permute(c, 2, 0, 1), 0, 1, 4, 2))
		b.Output("reshape", b.Reshape(b.Expand(b.Sum(x, 2), 2, 3, 5), 5, 6))
	}},
	{"slice update and state", func(b *Builder) {
		kv := b.State("kv", F32, 1, 2, 6, 4)
		nw := b.Input("new", F32, 1, 2, 2, 4)
		up := b.SliceUpdate(kv, b.Mul(nw, nw), 2, 3)
		b.UpdateState(kv, up)
		b.Output("sum", b.Sum(up, 2))
		b.Output("cast", b.Cast(b.Cast(up, F16), I32))
	}},
	{"reductions", func(b *Builder) {
		x := b.Input("x", F32, 3, 4, 5)
		b.Output("sum0", b.Sum(x, 0))
		b.Output("max1", b.ReduceMax(b.Neg(x), 1))
		b.Output("mean2", b.Mean(b.Exp(x), 2))
		i := b.Input("i", I32, 4, 3)
		b.Output("isum", b.Sum(b.Mul(i, i), 1))
		b.Output("idiv", b.Div(i, b.Add(b.Abs(i), b.Scalar(I32, 1))))
	}},
}

// pointGraphs is every graph EvalAt is checked on: the text format's cases
// (every op, with odd values and empty tensors), the hand-built ones above
// and seeded random graphs.
func pointGraphs(t testing.TB) []*Graph {
	var gs []*Graph
	for _, tc := range append(slices.Clone(textCases), pointCases...) {
		g := tc.graph(t)
		g.Name = tc.name
		gs = append(gs, g)
	}
	for seed := range uint64(40) {
		g, err := randomGraph(seed)
		require.NoError(t, err)
		gs = append(gs, g)
	}
	g, err := exampleMLP()
	require.NoError(t, err)
	return append(gs, g)
}

// sampleIndices draws a seeded sample of a value's elements, unsorted and
// with a repeat; sometimes all of them (which stores them densely).
func sampleIndices(rng *rand.Rand, n int64) []int64 {
	if n == 0 {
		return nil
	}
	if rng.IntN(4) == 0 {
		out := make([]int64, n)
		for i := range out {
			out[i] = n - 1 - int64(i)
		}
		return out
	}
	out := make([]int64, 1+rng.IntN(6))
	for i := range out {
		out[i] = rng.Int64N(n)
	}
	return append(out, out[0])
}

// requireSame checks one element of EvalAt against Eval: NaNs and
// infinities exactly, finite values to 1e-12 of the scale (the magnitude,
// for values; summation order may differ).
func requireSame(t *testing.T, got, want, scale float64, msg string, args ...any) {
	t.Helper()
	switch {
	case math.IsNaN(want) || math.IsInf(want, 0):
		if !(math.IsNaN(want) && math.IsNaN(got)) {
			require.Equal(t, want, got, append([]any{msg}, args...)...)
		}
	default:
		if math.IsNaN(scale) || math.IsInf(scale, 0) {
			scale = math.Abs(want)
		}
		require.InDelta(t, want, got, 1e-12*math.Max(math.Abs(scale), math.Abs(want))+1e-300, append([]any{msg}, args...)...)
	}
}

func TestEvalAtMatchesEval(t *testing.T) {
	ctx := context.Background()
	for gi, g := range pointGraphs(t) {
		for _, mode := range []RandomMode{Typical, Stress} {
			t.Run(fmt.Sprintf("%s/%d", g.Name, mode), func(t *testing.T) {
				feeds, err := RandomFeeds(g, uint64(gi), mode)
				require.NoError(t, err)
				res, err := Eval(ctx, g, feeds, EvalOptions{Magnitude: true})
				require.NoError(t, err)
				truth := map[string]*Tensor{}
				for name, v := range res.States {
					truth[name] = v
				}
				for name, v := range res.Outputs {
					if _, ok := truth[name]; ok {
						// An output named like a state: EvalAt gives the
						// output, but Result.Magnitudes holds the state's.
						delete(truth, name)
						continue
					}
					truth[name] = v
				}
				names := slices.Sorted(maps.Keys(truth)) // the draws do not depend on map order
				rng := rand.New(rand.NewPCG(uint64(gi), uint64(mode)))
				for try := range 3 {
					want := map[string][]int64{}
					for _, name := range names {
						if try == 0 || rng.IntN(2) == 0 { // sometimes only some of the outputs
							want[name] = sampleIndices(rng, truth[name].Len())
						}
					}
					for _, magnitude := range []bool{true, false} {
						vals, mags, err := EvalAt(ctx, g, feeds, want, EvalOptions{Magnitude: magnitude})
						require.NoError(t, err)
						require.Len(t, vals, len(want))
						for name, idx := range want {
							require.Len(t, vals[name], len(idx), name)
							for p, j := range idx {
								w, wm := truth[name].At(j), res.Magnitudes[name].At(j)
								requireSame(t, vals[name][p], w, wm, "%s[%d] value", name, j)
								if magnitude {
									requireSame(t, mags[name][p], wm, wm, "%s[%d] magnitude", name, j)
								}
							}
						}
						if !magnitude {
							require.Nil(t, mags)
						}
					}
				}
			})
		}
	}
}

// bigMatmul is x [16,4096] times a [4096,28672] matrix computed from iotas
// (so that no 470 MB weight has to be made): the shape of a Llama 3 8B MLP
// projection for 16 tokens.
func bigMatmul(t testing.TB) (*Graph, map[string]*Tensor) {
	b := NewBuilder("big")
	x := b.Input("x", F32, 16, 4096)
	shape := Shape{4096, 28672}
	w := b.Unary(OpSin, b.Add(b.Iota(F32, shape, 0), b.Mul(b.Iota(F32, shape, 1), b.Scalar(F32, F32.Round(0.001)))))
	b.Output("y", b.MatMul(x, w))
	g, err := b.Build()
	require.NoError(t, err)
	feeds, err := RandomFeeds(g, 1, Typical)
	require.NoError(t, err)
	return g, feeds
}

// TestEvalAtScalesWithWant asks for 64 elements of a matmul that would
// take 1.9G multiply-adds whole, and counts the work instead of timing it.
func TestEvalAtScalesWithWant(t *testing.T) {
	g, feeds := bigMatmul(t)
	rng := rand.New(rand.NewPCG(5, 5))
	want := make([]int64, 64)
	for i := range want {
		want[i] = rng.Int64N(16 * 28672)
	}
	var st pointStats
	vals, mags, err := evalAt(context.Background(), g, feeds, map[string][]int64{"y": want}, EvalOptions{Magnitude: true}, &st)
	require.NoError(t, err)
	distinct := int64(len(sortUnique(slices.Clone(want))))
	cols := map[int64]bool{}
	for _, f := range want {
		cols[f%28672] = true
	}
	assert.Equal(t, distinct*4096, st.macs, "one row times one column per element")
	// The matmul's elements, and the columns of the matrix they read
	// through the three nodes that compute it (mul, add, sin; the iotas
	// and the broadcast scalar are read in place).
	assert.Equal(t, distinct+3*int64(len(cols))*4096, st.elements)
	x := feeds["x"]
	for p, f := range want {
		i, j := f/28672, f%28672
		sum, mag := 0.0, 0.0
		for k := range int64(4096) {
			w := math.Sin(float64(k) + float64(j)*F32.Round(0.001))
			sum += x.At(i*4096+k) * w
			mag += math.Abs(x.At(i*4096+k) * w)
		}
		require.InDelta(t, sum, vals["y"][p], 1e-12*mag, "element %d", f)
		require.GreaterOrEqual(t, mags["y"][p], mag*(1-1e-12))
	}
}

func TestEvalAtErrors(t *testing.T) {
	b := NewBuilder("errs")
	x := b.Input("x", F32, 2, 3)
	ids := b.Input("ids", I64, 2)
	i := b.Input("i", I32, 3)
	st := b.State("s", F32, 2, 3)
	b.Output("g", b.Gather(x, ids, 1))
	b.Output("div", b.Div(i, b.Sub(i, i)))
	b.Output("sum", b.Sum(x, 1))
	b.Output("s", b.Exp(st)) // an output named like the state it differs from
	b.UpdateState(st, b.Add(st, x))
	g, err := b.Build()
	require.NoError(t, err)
	feeds := map[string]*Tensor{
		"x":   mustTensor(t, F32, Shape{2, 3}, 1, 2, 3, 4, 5, 6),
		"ids": mustTensor(t, I64, Shape{2}, -3, 2),
		"i":   mustTensor(t, I32, Shape{3}, 1, 2, 3),
		"s":   mustTensor(t, F32, Shape{2, 3}, 1),
	}
	without := func(name string) map[string]*Tensor {
		m := map[string]*Tensor{}
		for k, v := range feeds {
			if k != name {
				m[k] = v
			}
		}
		return m
	}
	with := func(name string, v *Tensor) map[string]*Tensor {
		m := without(name)
		m[name] = v
		return m
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		feeds map[string]*Tensor
		want  map[string][]int64
		err   string
	}{
		{"unknown name", nil, feeds, map[string][]int64{"nope": {0}}, `eval at errs: no output or updated state named "nope"`},
		{"index past the end", nil, feeds, map[string][]int64{"sum": {0, 2}}, `eval at errs: "sum": index 2 (position 1) outside its 2 elements [2,1]`},
		{"negative index", nil, feeds, map[string][]int64{"g": {-1}}, `"g": index -1 (position 0) outside its 4 elements`},
		{"missing feed", nil, without("x"), map[string][]int64{"sum": {1}}, `eval at errs: node %0 (input): no input named "x" was fed`},
		{"mistyped feed", nil, with("x", mustTensor(t, F32, Shape{3, 2}, 1)), map[string][]int64{"sum": {1}}, `node %0 (input): input "x": got f32[3,2], want f32[2,3]`},
		{"gather index out of range", nil, with("ids", mustTensor(t, I64, Shape{2}, 0, 3)), map[string][]int64{"g": {3}}, "node %4 (gather): index 3 out of range for extent 3 on axis 1"},
		{"integer division by zero", nil, feeds, map[string][]int64{"div": {2}}, "(div): integer division by zero at element 2"},
		{"cancelled", cancelled, feeds, map[string][]int64{"sum": {0}}, "context canceled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			_, _, err := EvalAt(ctx, g, tc.feeds, tc.want, EvalOptions{Magnitude: true})
			require.ErrorContains(t, err, tc.err)
		})
	}
	// An output named like an updated state is the output.
	vals, _, err := EvalAt(context.Background(), g, feeds, map[string][]int64{"s": {0}}, EvalOptions{})
	require.NoError(t, err)
	require.Equal(t, []float64{math.Exp(1)}, vals["s"])
	// The gather reads only the indices asked for: a bad index elsewhere
	// does not matter, as a kernel checked on a sample would not read it.
	vals, _, err = EvalAt(context.Background(), g, with("ids", mustTensor(t, I64, Shape{2}, 0, 3)), map[string][]int64{"g": {0, 2}}, EvalOptions{})
	require.NoError(t, err)
	require.Equal(t, []float64{1, 4}, vals["g"])
}

// TestEvalAtState asks for a state buffer's update by the state's name.
func TestEvalAtState(t *testing.T) {
	b := NewBuilder("cache")
	cache := b.State("kv", F32, 1, 4)
	upd := b.SliceUpdate(cache, b.Exp(b.Input("x", F32, 1, 1)), 1, 2)
	b.UpdateState(cache, upd)
	b.Output("sum", b.Sum(upd, 1))
	g, err := b.Build()
	require.NoError(t, err)
	feeds := map[string]*Tensor{"kv": mustTensor(t, F32, Shape{1, 4}, 1, 2, 3, 4), "x": mustTensor(t, F32, Shape{1, 1}, 0)}
	vals, mags, err := EvalAt(context.Background(), g, feeds, map[string][]int64{"kv": {3, 2}, "sum": {0}}, EvalOptions{Magnitude: true})
	require.NoError(t, err)
	require.Equal(t, []float64{4, 1}, vals["kv"])
	require.Equal(t, []float64{8}, vals["sum"])
	require.Equal(t, []float64{4, 1}, mags["kv"])
}

// TestEvalElementsErrors checks EvalElements's own errors, and that those
// of the evaluation it shares with EvalAt are worded as its own.
func TestEvalElementsErrors(t *testing.T) {
	b := NewBuilder("elems")
	x := b.Input("x", F32, 2, 3)
	y := b.Exp(x)
	b.Output("y", y)
	g, err := b.Build()
	require.NoError(t, err)
	feeds := map[string]*Tensor{"x": mustTensor(t, F32, Shape{2, 3}, 0, 1, 2, 3, 4, 5)}
	got, err := EvalElements(g, feeds, y, [][]int64{{1, 2}, {0, 1}})
	require.NoError(t, err)
	require.Equal(t, []float64{math.Exp(5), math.Exp(1)}, got)
	for _, tc := range []struct {
		v     Value
		idx   [][]int64
		feeds map[string]*Tensor
		err   string
	}{
		{Value(7), [][]int64{{0, 0}}, feeds, "eval elements of elems: no value %7"},
		{y, [][]int64{{0}}, feeds, "eval elements of elems: index [0] for shape [2,3]"},
		{y, [][]int64{{0, 3}}, feeds, "eval elements of elems: index [0 3] outside shape [2,3]"},
		{y, [][]int64{{0, 0}}, nil, `eval elements of elems: node %0 (input): no input named "x" was fed`},
	} {
		_, err := EvalElements(g, tc.feeds, tc.v, tc.idx)
		require.ErrorContains(t, err, tc.err)
	}
}

// BenchmarkEvalAtMatmul asks for 64 elements of [16,4096]x[4096,28672],
// the second operand a transposed f32 weight as nn.Linear stores it.
func BenchmarkEvalAtMatmul(b *testing.B) {
	bl := NewBuilder("bench")
	x := bl.Input("x", F32, 16, 4096)
	w := bl.Weight("w", F32, 28672, 4096)
	bl.Output("y", bl.MatMul(x, bl.Transpose(w, 0, 1)))
	g, err := bl.Build()
	require.NoError(b, err)
	xs := make([]float32, 16*4096)
	ws := make([]float32, 28672*4096)
	for i := range xs {
		xs[i] = float32(i%7) - 3.5
	}
	for i := range ws {
		ws[i] = float32(i%13)*0.01 - 0.06
	}
	xt, err := TensorOfFloat32(F32, Shape{16, 4096}, xs)
	require.NoError(b, err)
	wt, err := TensorOfFloat32(F32, Shape{28672, 4096}, ws)
	require.NoError(b, err)
	feeds := map[string]*Tensor{"x": xt, "w": wt}
	rng := rand.New(rand.NewPCG(1, 1))
	want := make([]int64, 64)
	for i := range want {
		want[i] = rng.Int64N(16 * 28672)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, _, err := EvalAt(context.Background(), g, feeds, map[string][]int64{"y": want}, EvalOptions{Magnitude: true}); err != nil {
			b.Fatal(err)
		}
	}
}
