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
	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/rules"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// attnCase is a llama-like attention body: heads query heads sharing
// kvHeads K/V heads (GQA, by the reshape-expand-reshape views the corpus
// builders use), head dim d (dv for the values), s query rows and tk keys (the last s of which
// are the query positions), scaled by 1/sqrt(d), with optional rotary on
// the queries and keys and an optional causal mask, the heads merged back
// into [s, heads*dv]. Half precision computes the softmax in f32 between
// casts, as attentionBodyOf does.
type attnCase struct {
	dt                ir.DType
	heads, kvHeads, d ir.Dim
	dv                ir.Dim // the value head dim; d when 0
	s, tk             ir.Dim
	rotary, causal    bool
	// epilogue adds a residual to half the merged heads' output.
	epilogue bool
	scale    float64 // 1/sqrt(d) when 0
	name     string
}

func (c attnCase) body(t testing.TB) *ir.Graph {
	t.Helper()
	b := ir.NewBuilder("kernel")
	h, kvh, d, dv, s, tk := c.heads, c.kvHeads, c.d, c.dv, c.s, c.tk
	if dv == 0 {
		dv = d
	}
	q := b.Input("$0", c.dt, 1, h, s, d)
	k := b.Input("$1", c.dt, 1, kvh, tk, d)
	v := b.Input("$2", c.dt, 1, kvh, tk, dv)
	if c.rotary {
		cos, sin := b.Input("$3", c.dt, tk, d), b.Input("$4", c.dt, tk, d)
		rot := func(x ir.Value, heads, rows ir.Dim) ir.Value {
			shape := ir.Shape{1, heads, rows, d}
			half := b.Concat(3, b.Neg(b.Slice(x, 3, int64(d/2), int64(d), 1)), b.Slice(x, 3, 0, int64(d/2), 1))
			cs := b.BroadcastTo(b.Slice(cos, 0, int64(tk-rows), int64(tk), 1), shape)
			sn := b.BroadcastTo(b.Slice(sin, 0, int64(tk-rows), int64(tk), 1), shape)
			return b.Add(b.Mul(x, cs), b.Mul(half, sn))
		}
		q, k = rot(q, h, s), rot(k, kvh, tk)
	}
	grp := func(x ir.Value, d ir.Dim) ir.Value {
		return b.Reshape(b.Expand(b.Reshape(x, 1, kvh, 1, tk, d), 1, kvh, h/kvh, tk, d), 1, h, tk, d)
	}
	scores := b.MatMul(q, b.Permute(grp(k, d), 0, 1, 3, 2))
	if c.dt != ir.F32 {
		scores = b.Cast(scores, ir.F32)
	}
	scale := c.scale
	if scale == 0 {
		scale = float64(float32(1 / math.Sqrt(float64(d))))
	}
	scores = b.Mul(scores, b.BroadcastTo(b.Scalar(ir.F32, scale), ir.Shape{1, h, s, tk}))
	if c.causal {
		qi := b.Add(b.Iota(ir.I64, ir.Shape{s, tk}, 0), b.BroadcastTo(b.Scalar(ir.I64, float64(tk-s)), ir.Shape{s, tk}))
		keep := b.Binary(ir.OpGe, qi, b.Iota(ir.I64, ir.Shape{s, tk}, 1))
		mask := b.Where(keep, b.BroadcastTo(b.Scalar(ir.F32, 0), ir.Shape{s, tk}), b.BroadcastTo(b.Scalar(ir.F32, -3.4028234663852886e+38), ir.Shape{s, tk}))
		scores = b.Add(scores, b.BroadcastTo(mask, ir.Shape{1, h, s, tk}))
	}
	mx := b.BroadcastTo(b.ReduceMax(scores, 3), ir.Shape{1, h, s, tk})
	ex := b.Exp(b.Sub(scores, mx))
	p := b.Div(ex, b.BroadcastTo(b.Sum(ex, 3), ir.Shape{1, h, s, tk}))
	if c.dt != ir.F32 {
		p = b.Cast(p, c.dt)
	}
	o := b.MatMul(p, grp(v, dv))
	out := b.Reshape(b.Permute(o, 0, 2, 1, 3), s, h*dv)
	if c.epilogue {
		name := "$3"
		if c.rotary {
			name = "$5"
		}
		res := b.Input(name, c.dt, s, h*dv)
		out = b.Add(b.Mul(out, b.BroadcastTo(b.Scalar(c.dt, 0.5), ir.Shape{s, h * dv})), res)
	}
	b.Output("out0", out)
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

// Every schedule the attention form implements, by layout.
var (
	attnOneRow = []cost.Schedule{{BM: 1, BN: 32, Threads: 64}, {BM: 1, BN: 32, Threads: 128}, {BM: 1, BN: 32, Threads: 256}}
	attnRows   = []cost.Schedule{{BM: 4, BN: 32, Threads: 128}, {BM: 8, BN: 32, Threads: 128}, {BM: 8, BN: 32, Threads: 256},
		{BM: 16, BN: 32, Threads: 128}, {BM: 16, BN: 32, Threads: 256}}
	attnSplit = []cost.Schedule{{BM: 1, BN: 32, Threads: 64, SplitKeys: true}, {BM: 1, BN: 32, Threads: 256, SplitKeys: true}}
	attnTC    = []cost.Schedule{{BM: 16, BN: 32, Threads: 32, Tensor: true}, {BM: 64, BN: 32, Threads: 128, Tensor: true},
		{BM: 64, BN: 64, Threads: 128, Tensor: true}, {BM: 128, BN: 64, Threads: 256, Tensor: true}}
)

// attnCases are the emulated attention bodies: prefill with odd sizes
// (S = T = 37, not a multiple of any tile), decode (S = 1, T = 70), GQA
// (4 query heads on 2 K/V heads), rotary, f32, f16 and bf16, head dims of
// 8 (padded to 16 on tensor cores) and 32 and 64 (several k16 steps), and
// value rows of another length (40) than the keys' (16), and an epilogue
// (a scale and a residual after the heads are merged).
func attnCases() []attnCase {
	return []attnCase{
		{name: "prefill_f32", dt: ir.F32, heads: 4, kvHeads: 2, d: 8, s: 37, tk: 37, rotary: true, causal: true},
		{name: "prefill_f32_d32", dt: ir.F32, heads: 2, kvHeads: 1, d: 32, s: 21, tk: 45, rotary: true, causal: true},
		{name: "decode_f32", dt: ir.F32, heads: 4, kvHeads: 2, d: 8, s: 1, tk: 70, rotary: true, causal: true},
		{name: "prefill_bf16", dt: ir.BF16, heads: 4, kvHeads: 2, d: 8, s: 37, tk: 37, rotary: true, causal: true},
		{name: "prefill_f16_d64", dt: ir.F16, heads: 2, kvHeads: 1, d: 64, s: 37, tk: 37, rotary: true, causal: true},
		{name: "prefill_bf16_plain_d32", dt: ir.BF16, heads: 4, kvHeads: 2, d: 32, s: 37, tk: 70, causal: true},
		{name: "decode_bf16", dt: ir.BF16, heads: 4, kvHeads: 1, d: 16, s: 1, tk: 70, rotary: true, causal: true},
		{name: "decode_f16_plain", dt: ir.F16, heads: 4, kvHeads: 2, d: 32, s: 1, tk: 70},
		{name: "prefill_f32_dv40", dt: ir.F32, heads: 2, kvHeads: 2, d: 16, dv: 40, s: 19, tk: 33, causal: true},
		{name: "prefill_bf16_dv40", dt: ir.BF16, heads: 2, kvHeads: 2, d: 16, dv: 40, s: 19, tk: 33, causal: true},
		{name: "prefill_f32_epilogue", dt: ir.F32, heads: 4, kvHeads: 2, d: 16, s: 21, tk: 21, rotary: true, causal: true, epilogue: true},
		{name: "prefill_bf16_epilogue", dt: ir.BF16, heads: 4, kvHeads: 2, d: 16, s: 21, tk: 21, causal: true, epilogue: true},
	}
}

// attnRun is a set of printed attention kernels with their inputs and the
// reference's outputs.
type attnRun struct {
	kernels []*Kernel
	bodies  []*ir.Graph
	args    [][]*ir.Tensor
	outs    [][]ir.ValueType
	wants   []*ir.Result
}

func (r *attnRun) add(t *testing.T, k *Kernel, body *ir.Graph, seed uint64) {
	t.Helper()
	feeds, err := ir.RandomFeeds(body, seed, ir.Typical)
	require.NoError(t, err)
	want, err := ir.Eval(context.Background(), body, feeds, ir.EvalOptions{Magnitude: true})
	require.NoError(t, err)
	var in []*ir.Tensor
	for _, v := range body.Inputs() {
		f := feeds[body.Node(v).Name]
		nonzero := 0
		for j := range f.Len() {
			if f.At(j) != 0 {
				nonzero++
			}
		}
		require.Greater(t, nonzero, int(f.Len())*9/10, "%s: inputs are random and non-zero", k.Name)
		in = append(in, f)
	}
	var vt []ir.ValueType
	for _, o := range body.Outputs {
		n := body.Node(o.Value)
		vt = append(vt, ir.ValueType{Shape: n.Shape, DType: n.DType})
	}
	r.kernels, r.bodies, r.args, r.outs, r.wants = append(r.kernels, k), append(r.bodies, body), append(r.args, in), append(r.outs, vt), append(r.wants, want)
}

// check emulates the kernels and returns, per kernel, the mismatch of its
// output with the reference (nil when it agrees).
//
// The comparison is at the output's dtype, with the magnitude of the
// summed terms, as every kernel test's. For f16 and bf16 bodies that is
// the operand dtype's tolerance, and it is honest for the tensor-core
// layout too: the graph itself rounds the probabilities to the operand
// dtype (the cast before P V) and the output to it, so the kernel's P
// rounded to that dtype (before the division by the sum rather than after,
// a relative error of eps/2 of each term either way) is the graph's
// computation; the one rounding the graph does not have is of a computed
// q or k (the rotary prologue, exact in the reference, rounded to the
// operand dtype for the tensor cores, as the unfused program rounds it when
// it stores q and k). That moves a score by about eps times the magnitude
// of its terms (here |q||k|/sqrt(d) of order one), so each probability by
// that relative amount, well inside 8 (eps + ...) of the output's
// magnitude Σ p|v|.
func (r *attnRun) check(t *testing.T, opt emu.Options) []*ir.Mismatch {
	t.Helper()
	got, err := Emulate(context.Background(), r.kernels, r.args, r.outs, opt)
	require.NoError(t, err)
	out := make([]*ir.Mismatch, len(r.kernels))
	for i := range r.kernels {
		name := r.bodies[i].Outputs[0].Name
		mm, err := ir.Compare(got[i][0], r.wants[i].Outputs[name], r.wants[i].Magnitudes[name], 1024)
		require.NoError(t, err)
		out[i] = mm
	}
	return out
}

// TestAttentionSchedulesMatchReference prints every attention test body in
// every schedule of the form (the one-row default and its thread counts,
// the multi-row f32 layouts, the tensor-core layouts for half precision),
// runs them under emulation in thread order and shuffled, and compares
// them with the reference interpreter.
func TestAttentionSchedulesMatchReference(t *testing.T) {
	// Parallel: independent of the other tests, it shares the machine's
	// cores with them once the sequential tests are done.
	t.Parallel()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	var run attnRun
	for ci, c := range attnCases() {
		body := c.body(t)
		scheds := slices.Concat([]cost.Schedule{{}}, attnOneRow, attnSplit, attnRows)
		if c.dt != ir.F32 {
			scheds = append(scheds, attnTC...)
		}
		for si, s := range scheds {
			k, err := PrintKernelWith(fmt.Sprintf("%s_%d", c.name, si), c.name+" "+s.String(), body, s)
			require.NoError(t, err, "%s %s", c.name, s)
			run.add(t, k, body, uint64(ci+1))
		}
	}
	modes := []emu.Options{{}, {Shuffle: true, Seed: 7}}
	if testing.Short() {
		// Shuffled alone: the long test command runs them in thread
		// order too.
		modes = modes[1:]
	}
	for _, opt := range modes {
		for i, mm := range run.check(t, opt) {
			k := run.kernels[i]
			assert.Nil(t, mm, "%s (%s, shuffled %v): %v", k.Name, k.Schedule, opt.Shuffle, mm)
		}
	}
	t.Logf("%d attention kernels emulated", len(run.kernels))
}

// llamaAttention is a llama-3-8b-like attention layer's kernel body: 32
// query heads on 8 K/V heads, head dim 128, 512 positions, rotary on q and
// k, causal.
func llamaAttention(t testing.TB, dt ir.DType) *ir.Graph {
	return attnCase{name: "llama", dt: dt, heads: 32, kvHeads: 8, d: 128, s: 512, tk: 512, rotary: true, causal: true}.body(t)
}

// TestNVRTCCompilesAttention compiles the multi-row and tensor-core
// schedules of a llama-3-8b-like layer (f32 and bf16) and the tensor-core
// ones of test bodies in f16 (head dim 64) and bf16 (head dims 8, padded,
// and 192, the widest the layout takes) for sm_90, and the llama kernels and the f16 ones for sm_80: no spills
// and no local memory (the accumulators and fragments stay in registers),
// the static shared memory within 48 KiB, mma.sync, both ldmatrix forms
// and cp.async in the tensor-core kernels, no mma in the f32 ones. It logs
// each llama kernel's sm_90 registers, shared memory and spills. (The
// multi-row schedules of the small test bodies compile in
// TestNVRTCCompilesEverySchedule; NVRTC takes about a second a kernel on
// these index expressions, so the set is kept small.)
func TestNVRTCCompilesAttention(t *testing.T) {
	skipLong(t)
	// Parallel: independent of the other tests, it shares the machine's
	// cores with them once the sequential tests are done.
	t.Parallel()
	lib := nvrtcOrSkip(t)
	cases := map[string]attnCase{}
	for _, c := range attnCases() {
		cases[c.name] = c
	}
	printAll := func(name string, body *ir.Graph, scheds []cost.Schedule) []*Kernel {
		var ks []*Kernel
		for i, s := range scheds {
			k, err := PrintKernelWith(fmt.Sprintf("%s_%d", name, i), name+" "+s.String(), body, s)
			require.NoError(t, err, "%s %s", name, s)
			ks = append(ks, k)
		}
		return ks
	}
	llama := append(printAll("llama_f32", llamaAttention(t, ir.F32), attnRows), printAll("llama_bf16", llamaAttention(t, ir.BF16), append(slices.Clone(attnRows), attnTC...))...)
	// Decode over a long cache in the split-keys layout, a warp for every
	// 32 keys of 1024.
	decode := printAll("llama_decode_bf16", attnCase{dt: ir.BF16, heads: 32, kvHeads: 8, d: 128, s: 1, tk: 1024, rotary: true, causal: true}.body(t),
		[]cost.Schedule{{BM: 1, BN: 32, Threads: 256, SplitKeys: true}, {BM: 1, BN: 32, Threads: 1024, SplitKeys: true}})
	llama = append(llama, decode...)
	f16 := printAll("prefill_f16_d64", cases["prefill_f16_d64"].body(t), attnTC)
	bf16 := printAll("prefill_bf16", cases["prefill_bf16"].body(t), attnTC)
	// The widest heads the tensor-core layout takes.
	wide := printAll("wide_bf16", attnCase{dt: ir.BF16, heads: 8, kvHeads: 4, d: 192, s: 200, tk: 200, rotary: true, causal: true}.body(t), attnTC[:2])
	for _, build := range []struct {
		arch    string
		kernels []*Kernel
	}{{"sm_90", slices.Concat(llama, f16, bf16, wide)}, {"sm_80", slices.Concat(llama, f16)}} {
		arch := build.arch
		res, err := lib.Compile(context.Background(), NVRTCPrelude+Source(build.kernels), "attention.cu", nvrtc.Options{Arch: arch})
		require.NoError(t, err, arch)
		for _, k := range build.kernels {
			r, ok := res.Kernels[k.Name]
			require.True(t, ok, "%s: no resources for %s", arch, k.Name)
			assert.Zero(t, r.SpillStores, "%s: %s (%s) spills", arch, k.Name, k.Schedule)
			assert.Zero(t, r.StackBytes, "%s: %s (%s) keeps its arrays in registers", arch, k.Name, k.Schedule)
			assert.LessOrEqual(t, r.SharedBytes, attnStaticShared, "%s: %s (%s)", arch, k.Name, k.Schedule)
			j := strings.Index(res.PTX, ".entry "+k.Name+"(")
			require.GreaterOrEqual(t, j, 0, "%s: entry %s", arch, k.Name)
			entry := res.PTX[j:]
			entry = entry[:strings.Index(entry, "\n}")]
			assert.NotContains(t, entry, ".local", "%s %s (%s): no local memory", arch, k.Name, k.Schedule)
			if k.Schedule.Tensor {
				dt := "bf16"
				if strings.Contains(k.Name, "f16") && !strings.Contains(k.Name, "bf16") {
					dt = "f16"
				}
				assert.Contains(t, entry, "mma.sync.aligned.m16n8k16.row.col.f32."+dt+"."+dt+".f32", "%s %s", arch, k.Name)
				assert.Contains(t, entry, "ldmatrix.sync.aligned.m8n8.x4.shared.b16", "%s %s", arch, k.Name)
				assert.Contains(t, entry, "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", "%s %s", arch, k.Name)
				assert.Contains(t, entry, "cp.async.cg.shared.global", "%s %s: the value tile by cp.async", arch, k.Name)
				// The key loop's fragments come through ldmatrix (the
				// queries' stay in registers, loaded before it).
				loops := mmaLoops(entry)
				require.NotEmpty(t, loops, "%s %s: no key loop around mma.sync", arch, k.Name)
				for _, loop := range loops {
					assert.Zero(t, len(fragmentLoad.FindAllString(loop, -1)), "%s %s: 32-bit ld.shared in the key loop", arch, k.Name)
				}
			} else {
				assert.NotContains(t, entry, "mma.sync", "%s %s", arch, k.Name)
			}
			if arch == "sm_90" && strings.HasPrefix(k.Name, "llama") {
				t.Logf("%s %s (%s): %d registers, %d bytes shared, %d spill stores, %d spill loads", arch, k.Name, k.Schedule, r.Registers, r.SharedBytes, r.SpillStores, r.SpillLoads)
			}
		}
	}
}

// TestAttentionBreakageIsCaught: the emulated comparison catches a wrong
// kernel. Each breakage is a one-line edit of a printed kernel: the
// rescaling factor of the online softmax inverted (exp(new max - old max))
// in the multi-row and tensor-core layouts and in the split-keys layout's
// combine of its warps, that combine summing the warps' sums unscaled,
// the warps' key tiles overlapping, the probabilities' fragments
// of P V taken in the wrong order (rows g + 8 where rows g belong), and
// the value tile's ldmatrix rows of the wrong column block.
func TestAttentionBreakageIsCaught(t *testing.T) {
	// Parallel: independent of the other tests, it shares the machine's
	// cores with them once the sequential tests are done.
	t.Parallel()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	f32 := attnCase{name: "f32", dt: ir.F32, heads: 4, kvHeads: 2, d: 32, s: 37, tk: 70, rotary: true, causal: true}.body(t)
	bf16 := attnCase{name: "bf16", dt: ir.BF16, heads: 4, kvHeads: 2, d: 32, s: 37, tk: 70, rotary: true, causal: true}.body(t)
	// Decode over 200 keys: four warps take 2 tiles each, and the fourth
	// a partial one; over 70 keys eight warps leave five without a key.
	decode := attnCase{name: "decode", dt: ir.F32, heads: 4, kvHeads: 2, d: 32, s: 1, tk: 200, rotary: true, causal: true}.body(t)
	decodeShort := attnCase{name: "decode_short", dt: ir.F32, heads: 4, kvHeads: 2, d: 32, s: 1, tk: 70, rotary: true, causal: true}.body(t)
	breakages := []struct {
		name     string
		body     *ir.Graph
		s        cost.Schedule
		old, new string
	}{
		{"rows_rescale", f32, cost.Schedule{BM: 8, BN: 32, Threads: 128}, "expf(m[i] - mnew)", "expf(mnew - m[i])"},
		{"split_combine", decode, cost.Schedule{BM: 1, BN: 32, Threads: 128, SplitKeys: true}, "expf(Ms[w] - M)", "expf(M - Ms[w])"},
		{"split_sum", decodeShort, cost.Schedule{BM: 1, BN: 32, Threads: 256, SplitKeys: true}, "L += a * Ls[w];", "L += Ls[w];"},
		{"split_stride", decode, cost.Schedule{BM: 1, BN: 32, Threads: 128, SplitKeys: true}, "t0 += 128)", "t0 += 32)"},
		{"tc_rescale", bf16, cost.Schedule{BM: 64, BN: 32, Threads: 128, Tensor: true}, "expf(mr[h] - mnew)", "expf(mnew - mr[h])"},
		{"tc_p_fragments", bf16, cost.Schedule{BM: 16, BN: 32, Threads: 32, Tensor: true},
			"pa[kk][1] = lum_pack_bf16x2(sacc[2 * kk][2], sacc[2 * kk][3]);", "pa[kk][1] = lum_pack_bf16x2(sacc[2 * kk + 1][0], sacc[2 * kk + 1][1]);"},
		{"tc_value_rows", bf16, cost.Schedule{BM: 64, BN: 64, Threads: 128, Tensor: true}, "np * 8 + lane / 16 * 4)", "np * 8)"},
	}
	var run attnRun
	for i, br := range breakages {
		k, err := PrintKernelWith(br.name, br.name, br.body, br.s)
		require.NoError(t, err)
		good := *k
		good.Name += "_good"
		good.Text = strings.Replace(k.Text, "void "+k.Name+"(", "void "+good.Name+"(", 1)
		require.Equal(t, 1, strings.Count(k.Text, br.old), "%s: the line to break", br.name)
		k.Text = strings.Replace(k.Text, br.old, br.new, 1)
		run.add(t, &good, br.body, uint64(40+i))
		run.add(t, k, br.body, uint64(40+i))
	}
	for i, mm := range run.check(t, emu.Options{Shuffle: true, Seed: 9}) {
		if i%2 == 0 {
			assert.Nil(t, mm, "%s, unbroken: %v", run.kernels[i].Name, mm)
		} else {
			assert.NotNil(t, mm, "%s: the breakage went unnoticed", run.kernels[i].Name)
		}
	}
}

// TestEmulatedLdmatrixLayout runs lum_ldmatrix_x4 and lum_ldmatrix_x4_trans
// under the emulation and checks every lane's registers against the
// fragment layout of the PTX ISA (9.7.14.5.15, ldmatrix: for .m8n8.x4.b16,
// lane l's register i holds row l/4, elements 2(l%4) and 2(l%4)+1 of
// matrix i, low half first; .trans delivers the transpose), tabulated
// here independently of emu.h. The rows are 32 bytes apart, so a lane
// reading its own row in place of the row another lane names shows.
func TestEmulatedLdmatrixLayout(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	k := &Kernel{Name: "ldmatrix_layout", Grid: [3]int{1, 1, 1}, Block: [3]int{32, 1, 1}, Inputs: 0,
		Params: []Param{{Name: "out0", Type: "int*"}},
		Text: `extern "C" __global__ void ldmatrix_layout(int* __restrict__ out0) {
  __shared__ __align__(16) unsigned short M[4][8][16];
  for (int i = threadIdx.x; i < 4 * 8 * 16; i += 32) M[i / 128][i / 16 % 8][i % 16] = (unsigned short)i;
  __syncthreads();
  const int l = threadIdx.x;
  unsigned r[4], rt[4];
  lum_ldmatrix_x4(r, &M[l / 8][l % 8][0]);
  lum_ldmatrix_x4_trans(rt, &M[l / 8][(l + 3) % 8][0]);
  for (int i = 0; i < 4; i++) {
    out0[l * 8 + i] = (int)r[i];
    out0[l * 8 + 4 + i] = (int)rt[i];
  }
}
`}
	for _, opt := range []emu.Options{{}, {Shuffle: true, Seed: 2}} {
		got, err := Emulate(context.Background(), []*Kernel{k}, [][]*ir.Tensor{{}}, [][]ir.ValueType{{{Shape: ir.Shape{32 * 8}, DType: ir.I32}}}, opt)
		require.NoError(t, err)
		at := func(m, row, col int) uint32 { return uint32(m*128 + row*16 + col) }
		for l := 0; l < 32; l++ {
			g, tg := l/4, l%4
			for i := 0; i < 4; i++ {
				want := at(i, g, 2*tg) | at(i, g, 2*tg+1)<<16
				assert.Equal(t, want, uint32(int32(got[0][0].At(int64(l*8+i)))), "lane %d register %d", l, i)
				// .trans: lane l named row (l+3)%8 of matrix l/8, so
				// matrix i's row j sits at M[i][(j+3)%8].
				wantT := at(i, (2*tg+3)%8, g) | at(i, (2*tg+1+3)%8, g)<<16
				assert.Equal(t, wantT, uint32(int32(got[0][0].At(int64(l*8+4+i)))), "lane %d register %d (.trans)", l, i)
			}
		}
	}
}

// TestAttentionScheduleListing: the cost model lists the multi-row and
// tensor-core layouts where they apply, and every schedule it lists for a
// llama-3-8b-like layer prints; on it the tensor cores win for bf16 and a
// multi-row layout for f32, while decode keeps the one-row layout listed
// and no f32 multi-row one (one query row would leave the others idle).
func TestAttentionScheduleListing(t *testing.T) {
	dev, err := cost.LookupDevice("h100")
	require.NoError(t, err)
	model := cost.NewModel(dev, cost.Defaults(dev))
	for _, tc := range []struct {
		name   string
		body   *ir.Graph
		best   func(cost.Schedule) bool
		tensor bool
	}{
		{"llama_bf16", llamaAttention(t, ir.BF16), func(s cost.Schedule) bool { return s.Tensor }, true},
		{"llama_f32", llamaAttention(t, ir.F32), func(s cost.Schedule) bool { return s.BM > 1 && !s.Tensor }, false},
		{"decode_bf16", attnCase{dt: ir.BF16, heads: 32, kvHeads: 8, d: 128, s: 1, tk: 512, rotary: true}.body(t), nil, true},
		{"decode_f32", attnCase{dt: ir.F32, heads: 32, kvHeads: 8, d: 128, s: 1, tk: 512, rotary: true}.body(t), nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ranked, err := model.Ranked(tc.body)
			require.NoError(t, err)
			var oneRow *cost.Estimate
			tensor, rows := false, false
			for i, e := range ranked {
				_, err := PrintKernelWith("k", "", tc.body, e.Schedule)
				require.NoError(t, err, "%s", e.Schedule)
				tensor = tensor || e.Schedule.Tensor
				rows = rows || e.Schedule.BM > 1 && !e.Schedule.Tensor
				if e.Schedule.BM == 1 && oneRow == nil {
					oneRow = &ranked[i]
				}
			}
			require.NotNil(t, oneRow, "the one-row layout stays listed")
			assert.Equal(t, tc.tensor, tensor, "tensor-core layouts listed")
			if tc.best != nil {
				assert.True(t, tc.best(ranked[0].Schedule), "best %s", ranked[0].Schedule)
				assert.True(t, rows, "multi-row layouts listed")
			}
			if strings.HasPrefix(tc.name, "decode") {
				assert.False(t, rows, "no multi-row f32 layout for one query row")
			}
			t.Logf("%s on %s: best %s %.1f us (%.3g bytes), best one-row %s %.1f us; %d schedules", tc.name, dev.Name,
				ranked[0].Schedule, ranked[0].Seconds*1e6, ranked[0].Features.Bytes, oneRow.Schedule, oneRow.Seconds*1e6, len(ranked))
		})
	}
}

// TestAttentionPricing: the cost model prices what each layout does. On a
// long context whose keys and values L2 cannot keep, more query rows a
// block re-read them fewer times; the tensor-core layouts put the two
// matmuls on mma.sync in the operand dtype and only the softmax and
// prologues on FMA, the f32 layouts everything on FMA. A causal mask's
// blocks loop over the keys up to their last row (keyLoop), and the model
// prices that: about half the arithmetic.
func TestAttentionPricing(t *testing.T) {
	dev, err := cost.LookupDevice("h100")
	require.NoError(t, err)
	model := cost.NewModel(dev, cost.Defaults(dev))
	causal, err := model.Ranked(attnCase{dt: ir.BF16, heads: 32, kvHeads: 32, d: 128, s: 4096, tk: 4096, causal: true}.body(t))
	require.NoError(t, err)
	for _, e := range causal {
		if !e.Schedule.Tensor {
			continue
		}
		// Block b of BM rows loops over keys 0 .. (b+1) BM - 1, in
		// whole tiles of BN.
		var keys float64
		for b := 0; b < 4096/e.Schedule.BM; b++ {
			last := (b + 1) * e.Schedule.BM
			keys += float64((last + e.Schedule.BN - 1) / e.Schedule.BN * e.Schedule.BN)
		}
		assert.InDelta(t, 2*32*float64(e.Schedule.BM)*keys*256, e.Features.Work[1].FLOPs, 1, "%s", e.Schedule)
	}
	long := attnCase{dt: ir.BF16, heads: 32, kvHeads: 32, d: 128, s: 4096, tk: 4096}.body(t)
	ranked, err := model.Ranked(long)
	require.NoError(t, err)
	assert.Less(t, causal[0].Seconds, ranked[0].Seconds*0.75, "causal %s against full %s", causal[0].Schedule, ranked[0].Schedule)
	bytes := map[int]float64{}
	for _, e := range ranked {
		f := e.Features
		if e.Schedule.Tensor {
			require.Len(t, f.Work, 2, "%s", e.Schedule)
			assert.Equal(t, cost.FMA, f.Work[0].Class)
			assert.Equal(t, cost.MMA, f.Work[1].Class)
			assert.Equal(t, "bf16", f.Work[1].DType)
			// Q K^T and P V over the padded tiles: 2 * 32 heads * 4096^2 * 256.
			assert.InDelta(t, 2*32*4096*4096*256.0, f.Work[1].FLOPs, 1, "%s", e.Schedule)
		} else {
			require.Len(t, f.Work, 1, "%s", e.Schedule)
			assert.Equal(t, cost.FMA, f.Work[0].Class)
		}
		assert.Equal(t, 32*((4096+e.Schedule.BM-1)/e.Schedule.BM), f.Blocks, "%s: a block per BM query rows of a head", e.Schedule)
		bytes[e.Schedule.BM] = f.Bytes
	}
	for _, bm := range []int{1, 4, 8, 16, 64, 128} {
		require.Contains(t, bytes, bm)
	}
	assert.Greater(t, bytes[1], bytes[4])
	assert.Greater(t, bytes[4], bytes[16])
	assert.Greater(t, bytes[16], bytes[64])
	assert.GreaterOrEqual(t, bytes[64], bytes[128])
	assert.True(t, ranked[0].Schedule.Tensor, "best %s", ranked[0].Schedule)
}

// TestEveryLegalHalfAttentionPrints saturates tiny llama (prefill and
// decode) and GPT-2 layers in bf16 and f16 with every rule set, and prints
// every attention kernel body of their e-graphs under every schedule the
// cost model lists; each body then runs under emulation (shuffled) in its
// default schedule and every tensor-core schedule (whether listed for its
// four query rows or not) against the reference, at the output's dtype
// (see attnRun.check).
func TestEveryLegalHalfAttentionPrints(t *testing.T) {
	// Parallel: independent of the other tests, it shares the machine's
	// cores with them once the sequential tests are done.
	t.Parallel()
	dev, err := cost.LookupDevice("h100")
	require.NoError(t, err)
	model := cost.NewModel(dev, cost.Defaults(dev))
	emulate := exec.Command("g++", "--version").Run() == nil
	var run attnRun
	for _, tc := range []struct {
		model string
		dt    ir.DType
	}{{"tiny-llama:layer", ir.BF16}, {"tiny-llama:layer", ir.F16}, {"tiny-gpt2:block", ir.BF16}, {"tiny-llama:decode", ir.BF16}} {
		var pays []egraph.Payload
		for _, p := range corpusKernels(t, tc.model, tc.dt) {
			if body, _ := rules.Spec(p); formOf(t, body) == cost.FormAttention {
				pays = append(pays, p)
			}
		}
		require.NotEmpty(t, pays, "%s %s", tc.model, tc.dt)
		tensor := 0
		for bi, p := range pays {
			body, _ := rules.Spec(p)
			ranked, err := model.Ranked(body)
			require.NoError(t, err)
			for _, e := range ranked {
				_, err := PrintKernelWith("k", "", body, e.Schedule)
				require.NoError(t, err, "%s %s: %s\n%s", tc.model, tc.dt, e.Schedule, body)
				if e.Schedule.Tensor {
					tensor++
				}
			}
			if !emulate {
				continue
			}
			for si, s := range append([]cost.Schedule{{}}, attnTC...) {
				k, err := PrintKernelWith(fmt.Sprintf("legal_%d_%d_%d", len(run.kernels), bi, si), "", body, s)
				require.NoError(t, err, "%s %s: %s", tc.model, tc.dt, s)
				run.add(t, k, body, uint64(len(run.kernels)))
			}
		}
		assert.Equal(t, len(pays), tensor, "%s %s: every attention body has a tensor-core schedule listed", tc.model, tc.dt)
		t.Logf("%s %s: %d attention bodies", tc.model, tc.dt, len(pays))
	}
	if !emulate {
		return
	}
	for i, mm := range run.check(t, emu.Options{Shuffle: true, Seed: 12}) {
		assert.Nil(t, mm, "%s (%s): %v\n%s", run.kernels[i].Name, run.kernels[i].Schedule, mm, run.bodies[i])
	}
	t.Logf("%d kernels emulated", len(run.kernels))
}

// TestPrintAttentionLayouts prints the attention test bodies in every
// layout: deterministic text with no include and no asm; the default is
// the one-row layout with 128 threads; the tensor-core layout multiplies
// with mma through the prelude's helpers, takes fragments with ldmatrix,
// packs the probabilities, and copies plain operands (the GQA views of k
// and v, an unrotated q) with cp.async while it computes and packs rotated
// ones; and schedules the layouts cannot run are refused, naming them.
func TestPrintAttentionLayouts(t *testing.T) {
	for _, c := range attnCases() {
		body := c.body(t)
		def, err := PrintKernel("k", "", body)
		require.NoError(t, err)
		one, err := PrintKernelWith("k", "", body, cost.Schedule{BM: 1, BN: 32, Threads: 128})
		require.NoError(t, err)
		assert.Equal(t, one.Text, def.Text, "%s: the default is the one-row layout", c.name)
		scheds := attnRows
		if c.dt != ir.F32 {
			scheds = append(slices.Clone(attnRows), attnTC...)
		}
		for _, s := range scheds {
			k, err := PrintKernelWith("k", "", body, s)
			require.NoError(t, err)
			again, err := PrintKernelWith("k", "", body, s)
			require.NoError(t, err)
			assert.Equal(t, k.Text, again.Text, "printing is deterministic")
			assert.NotContains(t, k.Text, "#include")
			assert.NotContains(t, k.Text, "asm")
			assert.Equal(t, [3]int{s.Threads, 1, 1}, k.Block)
			rows := int((c.s + ir.Dim(s.BM) - 1) / ir.Dim(s.BM))
			assert.Equal(t, [3]int{rows * int(c.heads), 1, 1}, k.Grid, "%s %s: a block per BM query rows of a head", c.name, s)
			if !s.Tensor {
				assert.NotContains(t, k.Text, "lum_mma")
				assert.Contains(t, k.Text, "__shared__ float Ks[32]")
				continue
			}
			dt := c.dt.String()
			for _, want := range []string{"lum_mma_m16n8k16_" + dt + "(", "lum_ldmatrix_x4(", "lum_ldmatrix_x4_trans(", "lum_pack_" + dt + "x2(sacc"} {
				assert.Contains(t, k.Text, want, "%s %s", c.name, s)
			}
			// cp.async for q (plain only without rotary) and the first and
			// next key tiles (idem), and the value tile (always plain).
			copies := 1
			if !c.rotary && c.d%8 == 0 {
				copies += 3
			}
			if c.dv%8 != 0 || c.dv == 0 && c.d%8 != 0 {
				copies--
			}
			assert.Equal(t, copies, strings.Count(k.Text, "lum_cp_async16("), "%s %s: cp.async loads", c.name, s)
		}
	}
	f32, bf16 := attnCases()[0].body(t), attnCases()[3].body(t)
	wide := attnCase{dt: ir.BF16, heads: 2, kvHeads: 1, d: 256, s: 64, tk: 64}.body(t)
	for _, tt := range []struct {
		body *ir.Graph
		s    cost.Schedule
		msg  string
	}{
		{f32, cost.Schedule{BM: 16, BN: 32, Threads: 32, Tensor: true}, "all f16 or all bf16"},
		{bf16, cost.Schedule{BM: 24, BN: 32, Threads: 48, Tensor: true}, "a warp per 16 query rows"},
		{bf16, cost.Schedule{BM: 16, BN: 24, Threads: 32, Tensor: true}, "a multiple of 16"},
		{bf16, cost.Schedule{BM: 16, BN: 32, Threads: 32, Stages: 2, Tensor: true}, "a warp per 16 query rows"},
		{f32, cost.Schedule{BM: 4, BN: 32, Threads: 256}, "whole number of query rows"},
		{f32, cost.Schedule{BM: 4, BN: 64, Threads: 128}, "32 keys"},
		{wide, cost.Schedule{BM: 16, BN: 32, Threads: 128}, "shared memory"},
		{wide, cost.Schedule{BM: 16, BN: 32, Threads: 32, Tensor: true}, "registers"},
	} {
		_, err := PrintKernelWith("k", "", tt.body, tt.s)
		require.Error(t, err, "%s", tt.s)
		assert.Contains(t, err.Error(), tt.s.String())
		assert.Contains(t, err.Error(), tt.msg)
	}
	// The cost model lists none of the refused ones for the wide heads,
	// and every one it lists prints.
	dev, err := cost.LookupDevice("h100")
	require.NoError(t, err)
	ranked, err := cost.NewModel(dev, cost.Defaults(dev)).Ranked(wide)
	require.NoError(t, err)
	for _, e := range ranked {
		_, err := PrintKernelWith("k", "", wide, e.Schedule)
		assert.NoError(t, err, "%s", e.Schedule)
	}
}
