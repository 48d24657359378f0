package cuda

import (
	"context"
	"fmt"
	"math"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// boundMask is how an attention body with a runtime position states its
// mask.
type boundMask uint8

const (
	// boundOp: the attention op with its runtime position operand, as a
	// decode step over a KV cache builds it (decomposed by the printer).
	boundOp boundMask = iota
	// boundWindow: the eager form with a sliding-window causal mask added
	// to the scores, and(ge(d, 0), lt(d, window)) for d = i - j + pos,
	// as corpus.causalMask builds it.
	boundWindow
	// boundFlipped: the eager form whose scores are replaced by the fill
	// where the key lies past the query, where(gt(j, pos + i), fill, s).
	boundFlipped
)

// boundCase is an attention body whose visible keys follow a runtime
// position: heads query heads on kvHeads K/V heads, s query rows, tk keys
// (a KV cache's capacity), head dim d.
type boundCase struct {
	name                  string
	dt                    ir.DType
	mask                  boundMask
	heads, kvHeads, s, tk ir.Dim
	d                     ir.Dim
	window                int64
	// positions are the runtime positions the kernels run at.
	positions []int64
}

func (c boundCase) body(t testing.TB) *ir.Graph {
	t.Helper()
	b := ir.NewBuilder("kernel")
	h, kvh, s, tk, d := c.heads, c.kvHeads, c.s, c.tk, c.d
	q := b.Input("$0", c.dt, 1, h, s, d)
	k := b.Input("$1", c.dt, 1, kvh, tk, d)
	v := b.Input("$2", c.dt, 1, kvh, tk, d)
	pos := b.Input("$3", ir.I32)
	scale := float64(float32(1 / math.Sqrt(float64(d))))
	if c.mask == boundOp {
		b.Output("out0", b.CausalAttentionAt(q, k, v, scale, 0, pos))
		g, err := b.Build()
		require.NoError(t, err)
		return g
	}
	grp := func(x ir.Value) ir.Value {
		return b.Reshape(b.Expand(b.Reshape(x, 1, kvh, 1, tk, d), 1, kvh, h/kvh, tk, d), 1, h, tk, d)
	}
	full := ir.Shape{1, h, s, tk}
	scores := b.Mul(b.Cast(b.MatMul(q, b.Permute(grp(k), 0, 1, 3, 2)), ir.F32), b.BroadcastTo(b.Scalar(ir.F32, scale), full))
	mask := ir.Shape{s, tk}
	at := b.Cast(pos, ir.I64)
	lowest := b.Scalar(ir.F32, -math.MaxFloat32)
	switch c.mask {
	case boundWindow:
		diff := b.Add(b.Sub(b.Iota(ir.I64, mask, 0), b.Iota(ir.I64, mask, 1)), at)
		see := b.Binary(ir.OpAnd, b.Binary(ir.OpGe, diff, b.Scalar(ir.I64, 0)), b.Binary(ir.OpLt, diff, b.Scalar(ir.I64, float64(c.window))))
		scores = b.Add(scores, b.BroadcastTo(b.Where(see, b.Scalar(ir.F32, 0), lowest), full))
	case boundFlipped:
		past := b.Binary(ir.OpGt, b.Iota(ir.I64, mask, 1), b.Add(at, b.Iota(ir.I64, mask, 0)))
		scores = b.Where(b.BroadcastTo(past, full), lowest, scores)
	}
	mx := b.BroadcastTo(b.ReduceMax(scores, 3), full)
	ex := b.Exp(b.Sub(scores, mx))
	p := b.Div(ex, b.BroadcastTo(b.Sum(ex, 3), full))
	if c.dt != ir.F32 {
		p = b.Cast(p, c.dt)
	}
	b.Output("out0", b.MatMul(p, grp(v)))
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

// schedules are every schedule the attention form prints for the case's
// dtype: the default, the one-row and multi-row layouts, and the tensor
// cores for half precision.
func (c boundCase) schedules() []cost.Schedule {
	out := slices.Concat([]cost.Schedule{{}}, attnOneRow, attnRows)
	if c.dt != ir.F32 {
		out = append(out, attnTC...)
	}
	return out
}

// boundFeeds are random inputs of a bound case's body with its position
// at pos, and the reference's outputs on them.
func boundFeeds(t *testing.T, body *ir.Graph, pos int64, seed uint64) ([]*ir.Tensor, *ir.Result) {
	t.Helper()
	feeds, err := ir.RandomFeeds(body, seed, ir.Typical)
	require.NoError(t, err)
	at, err := ir.TensorOfInts(ir.I32, ir.Shape{}, pos)
	require.NoError(t, err)
	feeds["$3"] = at
	want, err := ir.Eval(context.Background(), body, feeds, ir.EvalOptions{Magnitude: true})
	require.NoError(t, err)
	var in []*ir.Tensor
	for _, v := range body.Inputs() {
		in = append(in, feeds[body.Node(v).Name])
	}
	return in, want
}

// TestAttentionBoundMatchesReference: attention bodies whose keys follow a
// runtime position (the attention op over a KV cache, a sliding window, a
// flipped where) print a key loop bounded by the position read from the
// kernel's input, in every layout, and under emulation (shuffled) match
// the reference at positions 0, the last, odd ones in between, and, for
// the eager masks, positions where some query rows see no key at all (the
// kernel then loops over every key, as the reference's softmax spreads
// over them).
func TestAttentionBoundMatchesReference(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	cases := []boundCase{
		{name: "decode_f32", dt: ir.F32, mask: boundOp, heads: 4, kvHeads: 2, s: 1, tk: 70, d: 16, positions: []int64{0, 69, 37}},
		{name: "decode_bf16", dt: ir.BF16, mask: boundOp, heads: 4, kvHeads: 1, s: 1, tk: 70, d: 16, positions: []int64{0, 69, 23}},
		{name: "chunk_f32", dt: ir.F32, mask: boundOp, heads: 2, kvHeads: 2, s: 5, tk: 45, d: 8, positions: []int64{0, 40, 17}},
		{name: "chunk_bf16", dt: ir.BF16, mask: boundOp, heads: 2, kvHeads: 1, s: 19, tk: 83, d: 32, positions: []int64{0, 64, 33}},
		{name: "window_f32", dt: ir.F32, mask: boundWindow, heads: 2, kvHeads: 1, s: 6, tk: 77, d: 8, window: 9, positions: []int64{0, 71, 40, -3}},
		{name: "window_bf16", dt: ir.BF16, mask: boundWindow, heads: 2, kvHeads: 2, s: 6, tk: 77, d: 16, window: 20, positions: []int64{0, 71, 51, -2}},
		{name: "flipped_f32", dt: ir.F32, mask: boundFlipped, heads: 2, kvHeads: 2, s: 3, tk: 50, d: 8, positions: []int64{0, 47, 29, -1}},
	}
	type run struct {
		kernel *Kernel
		body   *ir.Graph
		pos    int64
		args   []*ir.Tensor
		want   *ir.Result
	}
	var runs []run
	for ci, c := range cases {
		body := c.body(t)
		for si, s := range c.schedules() {
			k, err := PrintKernelWith(fmt.Sprintf("%s_%d", c.name, si), c.name+" "+s.String(), body, s)
			require.NoError(t, err, "%s %s", c.name, s)
			require.Contains(t, k.Text, "for (long long t0 = kbeg; t0 < kend;", "%s %s: the key loop is bounded", c.name, s)
			require.Contains(t, k.Text, "(long long)in3[0]", "%s %s: the position is read from its input", c.name, s)
			// One kernel launched at every position: compiled once.
			for pi, pos := range c.positions {
				args, want := boundFeeds(t, body, pos, uint64(100*ci+pi+1))
				runs = append(runs, run{kernel: k, body: body, pos: pos, args: args, want: want})
			}
		}
	}
	var kernels []*Kernel
	var args [][]*ir.Tensor
	var outs [][]ir.ValueType
	for _, r := range runs {
		n := r.body.Node(r.body.Outputs[0].Value)
		kernels, args, outs = append(kernels, r.kernel), append(args, r.args), append(outs, []ir.ValueType{{Shape: n.Shape, DType: n.DType}})
	}
	got, err := Emulate(context.Background(), kernels, args, outs, emu.Options{Shuffle: true, Seed: 5})
	require.NoError(t, err)
	for i, r := range runs {
		mm, err := ir.Compare(got[i][0], r.want.Outputs["out0"], r.want.Magnitudes["out0"], 1024)
		require.NoError(t, err)
		assert.Nil(t, mm, "%s (%s) at position %d: %v", r.kernel.Name, r.kernel.Schedule, r.pos, mm)
	}
	t.Logf("%d kernels emulated", len(runs))
}

// TestAttentionBoundReadsOnlyVisibleKeys is the byte count: a
// decode step's attention (one query row, 4 query heads on one K/V head,
// a cache of 64 keys) at positions 3 and 60, in every layout, reads at
// most past+1 rows of the key and value caches plus one tile. The caches
// handed to the emulated kernel hold only those rows, their data flush
// against the emulation's guard page (a read past them is an
// out-of-bounds access, reported), and the rows past the position hold
// NaN (a read of one that reaches the output makes it NaN): the output
// must be bit for bit that of the whole caches, and the reference's. The
// same kernel with its bound dropped is caught.
func TestAttentionBoundReadsOnlyVisibleKeys(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	const T, D = 64, 16
	for _, dt := range []ir.DType{ir.F32, ir.BF16} {
		c := boundCase{dt: dt, mask: boundOp, heads: 4, kvHeads: 1, s: 1, tk: T, d: D}
		body := c.body(t)
		out := []ir.ValueType{{Shape: ir.Shape{1, 4, 1, D}, DType: dt}}
		// The kernels are printed once and each launched on the whole
		// caches and on the cut ones, at both positions (the position is
		// an input): one runner a dtype.
		var printed []*Kernel
		for si, s := range c.schedules() {
			k, err := PrintKernelWith(fmt.Sprintf("decode_%s_%d", dt, si), "", body, s)
			require.NoError(t, err, "%s", s)
			printed = append(printed, k)
		}
		for _, past := range []int64{3, 60} {
			var kernels []*Kernel
			var args [][]*ir.Tensor
			var wants []*ir.Result
			for si, k := range printed {
				full, want := boundFeeds(t, body, past, uint64(past)*31+uint64(si))
				tile := int64(attnTile)
				if k.Schedule.Tensor {
					tile = int64(k.Schedule.BN)
				}
				rows := min(T, past+1+tile)
				cut := slices.Clone(full)
				cut[1], cut[2] = poisonedRows(t, full[1], rows, past+1), poisonedRows(t, full[2], rows, past+1)
				kernels = append(kernels, k, k)
				args = append(args, full, cut)
				wants = append(wants, want, want)
			}
			outs := make([][]ir.ValueType, len(kernels))
			for i := range outs {
				outs[i] = out
			}
			got, err := Emulate(context.Background(), kernels, args, outs, emu.Options{Shuffle: true, Seed: 3})
			require.NoError(t, err, "%s at past %d: the kernels read only the visible rows", dt, past)
			for i := 0; i < len(kernels); i += 2 {
				k := kernels[i+1]
				assert.Equal(t, got[i][0].Float64s(), got[i+1][0].Float64s(), "%s (%s) at past %d: the rows past the position change nothing", k.Name, k.Schedule, past)
				mm, err := ir.Compare(got[i+1][0], wants[i].Outputs["out0"], wants[i].Magnitudes["out0"], 1024)
				require.NoError(t, err)
				assert.Nil(t, mm, "%s (%s) at past %d: %v", k.Name, k.Schedule, past, mm)
			}
		}
	}
	// Without its bound the kernel reads the whole cache, which the
	// shortened buffers do not hold.
	c := boundCase{dt: ir.F32, mask: boundOp, heads: 4, kvHeads: 1, s: 1, tk: T, d: D}
	body := c.body(t)
	k, err := PrintKernel("unbounded", "", body)
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(k.Text, "if (seen) {"))
	k.Text = strings.Replace(k.Text, "if (seen) {", "if (false) {", 1)
	full, _ := boundFeeds(t, body, 3, 9)
	cut := slices.Clone(full)
	cut[1], cut[2] = poisonedRows(t, full[1], 3+1+attnTile, 4), poisonedRows(t, full[2], 3+1+attnTile, 4)
	_, err = Emulate(context.Background(), []*Kernel{k}, [][]*ir.Tensor{cut}, [][]ir.ValueType{{{Shape: ir.Shape{1, 4, 1, D}, DType: ir.F32}}}, emu.Options{})
	require.Error(t, err, "the unbounded kernel reads past the rows it was given")
	assert.Contains(t, err.Error(), "out-of-bounds")
}

// poisonedRows is the first rows rows of a [1, 1, T, D] cache, those from
// nan on set to NaN.
func poisonedRows(t *testing.T, x *ir.Tensor, rows, nan int64) *ir.Tensor {
	t.Helper()
	require.Len(t, x.Shape, 4)
	require.EqualValues(t, 1, x.Shape[0]*x.Shape[1])
	d := int64(x.Shape[3])
	out := ir.NewTensor(x.DType, ir.Shape{1, 1, ir.Dim(rows), ir.Dim(d)})
	for i := range rows * d {
		v := x.At(i)
		if i/d >= nan {
			v = math.NaN()
		}
		out.Set(i, v)
	}
	return out
}

// TestNVRTCCompilesAttentionBound compiles the bounded key loops of the
// runtime-position bodies in every layout for sm_90: no spills and no
// stack frame (the bound is a few scalars a thread).
func TestNVRTCCompilesAttentionBound(t *testing.T) {
	skipLong(t)
	t.Parallel()
	lib := nvrtcOrSkip(t)
	var kernels []*Kernel
	for _, c := range []boundCase{
		{name: "decode_f32", dt: ir.F32, mask: boundOp, heads: 32, kvHeads: 8, s: 1, tk: 4096, d: 128},
		{name: "decode_bf16", dt: ir.BF16, mask: boundOp, heads: 32, kvHeads: 8, s: 1, tk: 4096, d: 128},
		{name: "window_bf16", dt: ir.BF16, mask: boundWindow, heads: 8, kvHeads: 8, s: 64, tk: 1024, d: 64, window: 256},
	} {
		body := c.body(t)
		for si, s := range c.schedules() {
			k, err := PrintKernelWith(fmt.Sprintf("%s_%d", c.name, si), "", body, s)
			require.NoError(t, err, "%s %s", c.name, s)
			kernels = append(kernels, k)
		}
	}
	res, err := lib.Compile(context.Background(), NVRTCPrelude+Source(kernels), "attention_bound.cu", nvrtc.Options{Arch: "sm_90"})
	require.NoError(t, err)
	for _, k := range kernels {
		r, ok := res.Kernels[k.Name]
		require.True(t, ok, "no resources for %s", k.Name)
		assert.Zero(t, r.SpillStores, "%s (%s) spills", k.Name, k.Schedule)
		assert.Zero(t, r.StackBytes, "%s (%s) keeps a stack frame", k.Name, k.Schedule)
	}
}
