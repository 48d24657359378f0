package cuda

import (
	"context"
	"fmt"
	"os/exec"
	"sort"
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

// tcBody is a tensor-core test body and what its loads should be.
type tcBody struct {
	body *ir.Graph
	// async: at least one operand is a plain K-contiguous buffer with K a
	// multiple of 8, copied with cp.async; packed: at least one operand is
	// computed and packed.
	async, packed bool
}

// tensorCoreBodies are matmul bodies with f16 and bf16 operands: awkward
// shapes (M = 1, N = 17, K = 33 and 40, K < 16, K = 1024), batched, with
// epilogues and prologues.
func tensorCoreBodies(t testing.TB) map[string]tcBody {
	t.Helper()
	build := func(f func(b *ir.Builder) ir.Value) *ir.Graph {
		b := ir.NewBuilder("kernel")
		b.Output("out0", f(b))
		g, err := b.Build()
		require.NoError(t, err)
		return g
	}
	bodies := map[string]tcBody{}
	for _, dt := range []ir.DType{ir.F16, ir.BF16} {
		p := "tc_" + dt.String() + "_"
		bodies[p+"linear"] = tcBody{build(func(b *ir.Builder) ir.Value {
			x, w := b.Input("$0", dt, 70, 72), b.Input("$1", dt, 50, 72)
			return b.MatMul(x, b.Permute(w, 1, 0))
		}), true, false}
		bodies[p+"bias_residual"] = tcBody{build(func(b *ir.Builder) ir.Value {
			x, w, bias, res := b.Input("$0", dt, 70, 40), b.Input("$1", dt, 50, 40), b.Input("$2", dt, 50), b.Input("$3", dt, 70, 50)
			y := b.MatMul(x, b.Permute(w, 1, 0))
			return b.Add(b.Add(y, b.BroadcastTo(bias, ir.Shape{70, 50})), res)
		}), true, false}
		bodies[p+"one_row"] = tcBody{build(func(b *ir.Builder) ir.Value {
			x, w := b.Input("$0", dt, 1, 40), b.Input("$1", dt, 17, 40)
			return b.Cast(b.MatMul(x, b.Permute(w, 1, 0)), ir.F32)
		}), true, false}
		bodies[p+"odd_k"] = tcBody{build(func(b *ir.Builder) ir.Value {
			x, w := b.Input("$0", dt, 17, 33), b.Input("$1", dt, 33, 9)
			return b.MatMul(x, w)
		}), false, true}
		bodies[p+"batched_scores"] = tcBody{build(func(b *ir.Builder) ir.Value {
			q, k := b.Input("$0", dt, 2, 4, 5, 8), b.Input("$1", dt, 2, 4, 7, 8)
			return b.Mul(b.MatMul(q, b.Permute(k, 0, 1, 3, 2)), b.BroadcastTo(b.Scalar(dt, 0.25), ir.Shape{2, 4, 5, 7}))
		}), true, false}
		bodies[p+"silu_prologue"] = tcBody{build(func(b *ir.Builder) ir.Value {
			g, u, w := b.Input("$0", dt, 3, 17, 40), b.Input("$1", dt, 3, 17, 40), b.Input("$2", dt, 40, 9)
			h := b.Mul(b.Mul(g, b.Sigmoid(g)), u)
			return b.MatMul(b.Reshape(h, 51, 40), w)
		}), false, true}
		// Operands read through views in 16-byte runs
		// (cost.StridedOperand): attention's output, its heads merged by
		// a permute and a reshape, into the output projection; a
		// transposed weight whose K a reshape splits; a slice of K at
		// an aligned offset. And one whose offset is not aligned: the
		// computed path.
		bodies[p+"merged_heads"] = tcBody{build(func(b *ir.Builder) ir.Value {
			o, w := b.Input("$0", dt, 1, 4, 37, 16), b.Input("$1", dt, 40, 64)
			return b.MatMul(b.Reshape(b.Permute(o, 0, 2, 1, 3), 37, 64), b.Permute(w, 1, 0))
		}), true, false}
		bodies[p+"split_weight"] = tcBody{build(func(b *ir.Builder) ir.Value {
			x, w := b.Input("$0", dt, 19, 32), b.Input("$1", dt, 24, 32)
			return b.MatMul(x, b.Reshape(b.Permute(b.Reshape(w, 24, 2, 16), 1, 2, 0), 32, 24))
		}), true, false}
		bodies[p+"k_slice"] = tcBody{build(func(b *ir.Builder) ir.Value {
			x, w := b.Input("$0", dt, 37, 80), b.Input("$1", dt, 24, 64)
			return b.MatMul(b.Slice(x, 1, 16, 80, 1), b.Permute(w, 1, 0))
		}), true, false}
		bodies[p+"k_slice_unaligned"] = tcBody{build(func(b *ir.Builder) ir.Value {
			x, w := b.Input("$0", dt, 37, 80), b.Input("$1", dt, 64, 24)
			return b.MatMul(b.Slice(x, 1, 3, 67, 1), w)
		}), false, true}
		bodies[p+"long_k"] = tcBody{build(func(b *ir.Builder) ir.Value {
			x, w := b.Input("$0", dt, 17, 1024), b.Input("$1", dt, 70, 1024)
			return b.MatMul(x, b.Permute(w, 1, 0))
		}), true, false}
	}
	// A llama RMS norm in bf16 before the projection: the statistics in
	// f32, the normalized row cast back and scaled by the bf16 weight.
	bodies["tc_bf16_rms_prologue"] = tcBody{build(func(b *ir.Builder) ir.Value {
		x, wn, w := b.Input("$0", ir.BF16, 1, 70, 96), b.Input("$1", ir.BF16, 96), b.Input("$2", ir.BF16, 40, 96)
		h := b.Cast(x, ir.F32)
		ms := b.Mul(b.Sum(b.Mul(h, h), 2), b.BroadcastTo(b.Scalar(ir.F32, float64(float32(1.0/96))), ir.Shape{1, 70, 1}))
		rs := b.Rsqrt(b.Add(ms, b.BroadcastTo(b.Scalar(ir.F32, float64(float32(1e-5))), ir.Shape{1, 70, 1})))
		n := b.Mul(b.BroadcastTo(wn, ir.Shape{1, 70, 96}), b.Cast(b.Mul(h, b.BroadcastTo(rs, ir.Shape{1, 70, 96})), ir.BF16))
		return b.MatMul(b.Reshape(n, 70, 96), b.Permute(w, 1, 0))
	}), true, true}
	// The composite RMS norm op, decomposed by the printer.
	bodies["tc_bf16_rms_composite"] = tcBody{build(func(b *ir.Builder) ir.Value {
		x, wn, w := b.Input("$0", ir.BF16, 2, 9, 64), b.Input("$1", ir.BF16, 64), b.Input("$2", ir.BF16, 64, 24)
		return b.MatMul(b.RMSNorm(x, wn, 1e-6), b.BroadcastTo(w, ir.Shape{2, 64, 24}))
	}), false, true}
	return bodies
}

func sortedNames[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// TestPrintTensorCore prints the tensor-core bodies: deterministic, no
// include and no asm, mma through the prelude's helpers, cp.async where an
// operand is a plain K-contiguous buffer, packing where it is computed.
func TestPrintTensorCore(t *testing.T) {
	bodies := tensorCoreBodies(t)
	for _, name := range sortedNames(bodies) {
		tc := bodies[name]
		t.Run(name, func(t *testing.T) {
			k, err := PrintKernel(name, "test kernel "+name, tc.body)
			require.NoError(t, err)
			again, err := PrintKernel(name, "test kernel "+name, tc.body)
			require.NoError(t, err)
			assert.Equal(t, k.Text, again.Text, "printing is deterministic")
			assert.NotContains(t, k.Text, "#include")
			assert.NotContains(t, k.Text, "asm")
			dt := "f16"
			if strings.Contains(name, "bf16") {
				dt = "bf16"
			}
			assert.Contains(t, k.Text, "lum_mma_m16n8k16_"+dt+"(")
			assert.Equal(t, tc.async, strings.Contains(k.Text, "lum_cp_async16("), "cp.async")
			assert.Equal(t, tc.packed, strings.Contains(k.Text, "lum_pack_"+dt+"x2("), "packing")
			assert.Equal(t, [3]int{128, 1, 1}, k.Block)
		})
	}
	// Mixed operand dtypes have no tensor-core form.
	b := ir.NewBuilder("kernel")
	x, w := b.Input("$0", ir.F16, 4, 8), b.Input("$1", ir.F32, 8, 4)
	b.Output("out0", b.MatMul(b.Cast(x, ir.F32), w))
	g, err := b.Build()
	require.NoError(t, err)
	_, err = PrintKernel("f32_of_f16", "", g)
	require.NoError(t, err, "a cast to f32 takes the f32 path")
}

// TestNVRTCCompilesTensorCore compiles the tensor-core kernels for sm_80
// and sm_90 and reads their PTX: mma.sync with every fragment of the main
// loop through ldmatrix (no 32-bit shared load left there), cp.async
// with wait_group for plain operands, f16x2/bf16x2 conversions for
// computed ones; no spills.
func TestNVRTCCompilesTensorCore(t *testing.T) {
	skipLong(t)
	// Parallel: independent of the other tests, it shares the machine's
	// cores with them once the sequential tests are done.
	t.Parallel()
	lib := nvrtcOrSkip(t)
	bodies := tensorCoreBodies(t)
	names := sortedNames(bodies)
	var kernels []*Kernel
	for _, name := range names {
		k, err := PrintKernel(name, "test kernel "+name, bodies[name].body)
		require.NoError(t, err)
		kernels = append(kernels, k)
	}
	src := NVRTCPrelude + Source(kernels)
	for _, arch := range []string{"sm_80", "sm_90"} {
		res, err := lib.Compile(context.Background(), src, "kernels.cu", nvrtc.Options{Arch: arch})
		require.NoError(t, err, arch)
		for _, name := range names {
			tc := bodies[name]
			r, ok := res.Kernels[name]
			require.True(t, ok, "%s: no resources for %s", arch, name)
			assert.Zero(t, r.SpillStores, "%s: %s spills", arch, name)
			assert.Zero(t, r.StackBytes, "%s: %s keeps its accumulators in registers", arch, name)
			if arch == "sm_90" {
				t.Logf("%s %s: %d registers, %d bytes shared, %d spill stores, %d spill loads", arch, name, r.Registers, r.SharedBytes, r.SpillStores, r.SpillLoads)
			}
			i := strings.Index(res.PTX, ".entry "+name+"(")
			require.GreaterOrEqual(t, i, 0, "%s: entry %s", arch, name)
			entry := res.PTX[i:]
			entry = entry[:strings.Index(entry, "\n}")]
			assert.NotContains(t, entry, ".local", "%s %s: no local memory", arch, name)
			dt := "f16"
			if strings.Contains(name, "bf16") {
				dt = "bf16"
			}
			assert.Contains(t, entry, "mma.sync.aligned.m16n8k16.row.col.f32."+dt+"."+dt+".f32", "%s %s", arch, name)
			// Every fragment of the main loop comes through ldmatrix;
			// no 32-bit shared load is left there.
			loops := mmaLoops(entry)
			require.NotEmpty(t, loops, "%s %s: no main loop around mma.sync", arch, name)
			for _, loop := range loops {
				assert.Contains(t, loop, "ldmatrix.sync.aligned.m8n8.x4.shared.b16", "%s %s: fragments by ldmatrix", arch, name)
				assert.Zero(t, len(fragmentLoad.FindAllString(loop, -1)), "%s %s: 32-bit ld.shared in the main loop", arch, name)
			}
			assert.Contains(t, entry, "cp.async.wait_group", "%s %s", arch, name)
			if n := MainLoopInstructions(res.PTX, name); strings.Contains(entry, "bra") && len(mmaLoops(entry)) > 0 && mmaLoops(entry)[0] != entry {
				assert.Positive(t, n, "%s %s: the main loop's instructions", arch, name)
			}
			if tc.async {
				assert.Contains(t, entry, "cp.async.cg.shared.global", "%s %s", arch, name)
			}
			if tc.packed {
				assert.Contains(t, entry, "cvt.rn."+dt+"x2.f32", "%s %s", arch, name)
				assert.Contains(t, entry, "st.shared.", "%s %s", arch, name)
			}
		}
	}
}

// TestEmulatedTensorCoreMatchesReference runs the tensor-core kernels
// under the CPU emulation (in thread order and shuffled) on random
// inputs and compares them with the reference interpreter, errors
// measured against the magnitude of the summed terms.
//
// The reference rounds every op's result to its dtype (a bf16 silu
// prologue is rounded after the sigmoid, the first product and the
// second); the kernel keeps a computed operand in f32 and rounds it once,
// when it packs it for the tensor cores. Each operand element then
// differs from the reference's by at most a few roundings, k * eps/2
// relative with k <= 4, so each product term a*b by at most that times
// |a*b| and the sum by that times the magnitude Σ|a*b| the comparison
// measures against: 4 * 2^-9 = 2^-7 for bf16 against ir.Tolerance(bf16,
// 1024) = 8 * (2^-8 + 36 * 2^-24) ≈ 2^-5, and 4 * 2^-12 for f16 against
// ≈ 2^-8. The kernel is not favoured either: its accumulation order
// differs from the reference's float64 sum, and its output is rounded
// once, like the reference's.
func TestEmulatedTensorCoreMatchesReference(t *testing.T) {
	// Parallel: independent of the other tests, it shares the machine's
	// cores with them once the sequential tests are done.
	t.Parallel()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	bodies := tensorCoreBodies(t)
	names := sortedNames(bodies)
	var kernels []*Kernel
	var args [][]*ir.Tensor
	var outs [][]ir.ValueType
	var wants []*ir.Result
	// The operands read through views, also in the other warp patches,
	// tile heights and pipeline depths.
	strided := []cost.Schedule{
		{BM: 16, BN: 32, BK: 32, Threads: 32, Stages: 2, Tensor: true},
		{BM: 64, BN: 64, BK: 32, Threads: 32, Stages: 3, Warp: 64, Tensor: true},
		{BM: 32, BN: 64, BK: 32, Threads: 64, Stages: 3, Tensor: true},
	}
	var extra []string
	schedule := map[string]cost.Schedule{} // else the form's default
	for _, name := range names {
		if strings.Contains(name, "merged_heads") || strings.Contains(name, "split_weight") || strings.Contains(name, "k_slice") {
			for i, s := range strided {
				n := fmt.Sprintf("%s_s%d", name, i)
				bodies[n], schedule[n] = bodies[name], s
				extra = append(extra, n)
			}
		}
	}
	// The largest tiles and the deepest pipeline, on a plain operand pair
	// and on an epilogue: 128x256 with 8 warps of 64x64, four stages.
	large := []cost.Schedule{
		{BM: 128, BN: 256, BK: 32, Threads: 256, Stages: 2, Warp: 64, Tensor: true},
		{BM: 64, BN: 64, BK: 32, Threads: 128, Stages: 4, Tensor: true},
		{BM: 128, BN: 64, BK: 32, Threads: 64, Stages: 4, Warp: 64, Tensor: true},
	}
	for _, name := range []string{"tc_bf16_linear", "tc_f16_bias_residual"} {
		for i, s := range large {
			n := fmt.Sprintf("%s_l%d", name, i)
			bodies[n], schedule[n] = bodies[name], s
			extra = append(extra, n)
		}
	}
	names = append(names, extra...)
	for i, name := range names {
		body := bodies[name].body
		k, err := PrintKernelWith(name, "test kernel "+name, body, schedule[name])
		require.NoError(t, err, name)
		feeds, err := ir.RandomFeeds(body, uint64(100+i), ir.Typical)
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
			require.Greater(t, nonzero, int(f.Len())*9/10, "%s: inputs are random and non-zero", name)
			in = append(in, f)
		}
		var vt []ir.ValueType
		for _, o := range body.Outputs {
			n := body.Node(o.Value)
			vt = append(vt, ir.ValueType{Shape: n.Shape, DType: n.DType})
		}
		kernels, args, outs, wants = append(kernels, k), append(args, in), append(outs, vt), append(wants, want)
	}
	for _, opt := range []emu.Options{{}, {Shuffle: true, Seed: 5}} {
		got, err := Emulate(context.Background(), kernels, args, outs, opt)
		require.NoError(t, err)
		for i, name := range names {
			for j, o := range bodies[name].body.Outputs {
				w := wants[i].Outputs[o.Name]
				mm, err := ir.Compare(got[i][j], w, wants[i].Magnitudes[o.Name], 1024)
				require.NoError(t, err)
				require.Nil(t, mm, "%s output %d (shuffled %v): %v", name, j, opt.Shuffle, mm)
			}
		}
	}
}

// TestEveryLegalHalfMatmulPrints saturates tiny llama (bf16 and f16) and
// GPT-2 (bf16) layers with every rule set and prints every matmul kernel
// body of their e-graphs through the tensor-core path; a deterministic
// sample runs under emulation against the reference. (GPT-2 in f16 prints
// too, but its GELU's cube of random pre-activations passes f16's 65504,
// which the unrounded reference does not.)
//
// An f32 output of a half-precision matmul is compared at the operand
// dtype's tolerance: the reference leaves every float op unrounded (only
// casts round), while the tensor cores take f16/bf16 operands, so a
// computed operand (a rotary or norm prologue in the model's dtype) is
// rounded once more than in the reference, an error of eps/2 of the
// operand dtype against the magnitude, which Tolerance(f32) cannot allow.
// The unfused program has the same rounding when it stores that operand
// as an f16/bf16 tensor.
func TestEveryLegalHalfMatmulPrints(t *testing.T) {
	// Parallel: independent of the other tests, it shares the machine's
	// cores with them once the sequential tests are done.
	t.Parallel()
	for _, tc := range []struct {
		model string
		dt    ir.DType
	}{{"tiny-llama:layer", ir.BF16}, {"tiny-llama:layer", ir.F16}, {"tiny-gpt2:block", ir.BF16}} {
		t.Run(tc.model+"/"+tc.dt.String(), func(t *testing.T) {
			var pays []egraph.Payload
			for _, p := range corpusKernels(t, tc.model, tc.dt) {
				if body, _ := rules.Spec(p); formOf(t, body) == cost.FormMatMul {
					pays = append(pays, p)
				}
			}
			require.NotEmpty(t, pays)
			for _, p := range pays {
				body, _ := rules.Spec(p)
				k, err := PrintKernel("k", "", body)
				require.NoError(t, err, "%s", body)
				require.Contains(t, k.Text, "lum_mma_m16n8k16_")
			}
			t.Logf("%d matmul bodies print through the tensor-core path", len(pays))
			if _, err := exec.LookPath("g++"); err != nil {
				return
			}
			var kernels []*Kernel
			var args [][]*ir.Tensor
			var outs [][]ir.ValueType
			var wants []*ir.Result
			for i := 0; i < len(pays) && len(kernels) < 24; i += 1 + len(pays)/24 {
				body, _ := rules.Spec(pays[i])
				gather := false
				for _, n := range body.Nodes {
					gather = gather || n.Op == ir.OpGather
				}
				if gather {
					continue
				}
				k, err := PrintKernel(fmt.Sprintf("s%d", len(kernels)), "", body)
				require.NoError(t, err)
				feeds, err := ir.RandomFeeds(body, uint64(i), ir.Typical)
				require.NoError(t, err)
				want, err := ir.Eval(context.Background(), body, feeds, ir.EvalOptions{Magnitude: true})
				require.NoError(t, err)
				var in []*ir.Tensor
				for _, v := range body.Inputs() {
					in = append(in, feeds[body.Node(v).Name])
				}
				var vt []ir.ValueType
				for _, o := range body.Outputs {
					on := body.Node(o.Value)
					vt = append(vt, ir.ValueType{Shape: on.Shape, DType: on.DType})
				}
				kernels, args, outs, wants = append(kernels, k), append(args, in), append(outs, vt), append(wants, want)
			}
			got, err := Emulate(context.Background(), kernels, args, outs, emu.Options{Shuffle: true, Seed: 4})
			require.NoError(t, err)
			for i, k := range kernels {
				for j := range outs[i] {
					name := fmt.Sprintf("out%d", j)
					g := got[i][j]
					if g.DType == ir.F32 {
						at := *g
						at.DType = tc.dt // the operand dtype's tolerance; the values are g's
						g = &at
					}
					mm, err := ir.Compare(g, wants[i].Outputs[name], wants[i].Magnitudes[name], 1024)
					require.NoError(t, err)
					assert.Nil(t, mm, "%s output %d: %v\n%s", k.Name, j, mm, k.Text)
				}
			}
			t.Logf("%d sampled bodies emulated", len(kernels))
		})
	}
}

// TestTensorSwizzleIsConflictFree checks the tiles' swizzle over all 32
// lanes: shared memory serves a warp's 16-byte accesses a quarter-warp
// (8 lanes, 128 bytes) at a time, so the 8 lanes of each quarter must
// touch 8 distinct 16-byte groups of banks. It checks ldmatrix's reads (a
// lane gives row lane % 8 of matrix lane / 8, at the fragment's chunk),
// the cp.async copies (thread t copies chunk t % 4 of row t / 4 + j R)
// and that the swizzle is a permutation of each row's words.
func TestTensorSwizzleIsConflictFree(t *testing.T) {
	group := func(row, word int) int { return (row%2*16 + tcSwizzle(row, word)) / 4 } // 16-byte group within a 128-byte line
	distinct := func(what string, groups []int) {
		t.Helper()
		seen := map[int]bool{}
		for _, g := range groups {
			assert.False(t, seen[g], "%s: two lanes of a quarter-warp in bank group %d (%v)", what, g, groups)
			seen[g] = true
		}
	}
	for base := 0; base < 256; base += 8 {
		// ldmatrix: A's matrices (rows wm+i*16 + lane/8%2*8 + lane%8, chunk
		// ks/4 + lane/16) and B's (rows wn+j*8 + lane/16*8 + lane%8, chunk
		// ks/4 + lane/8%2): each quarter-warp reads 8 consecutive rows at
		// one chunk.
		for chunk := range 4 {
			var gs []int
			for l := range 8 {
				gs = append(gs, group(base+l, 4*chunk))
			}
			distinct(fmt.Sprintf("ldmatrix rows %d..%d chunk %d", base, base+7, chunk), gs)
		}
		// cp.async: quarter-warp q of a warp copies rows 2q, 2q+1 (of a
		// group of 8 rows starting at base), chunks 0..3 each.
		for q := range 4 {
			var gs []int
			for l := range 8 {
				th := 8*q + l
				gs = append(gs, group(base+th/4%8, th%4*4))
			}
			distinct(fmt.Sprintf("cp.async quarter %d at row %d", q, base), gs)
		}
	}
	for r := range 16 {
		seen := map[int]bool{}
		for w := range 16 {
			p := tcSwizzle(r, w)
			require.True(t, p >= 0 && p < 16 && !seen[p], "row %d: word %d stored at %d", r, w, p)
			seen[p] = true
		}
	}
}

// TestNormPrologueSchedulesPrint: a matmul whose left operand is a
// composite RMS or layer norm keeps the norm's row statistics in shared
// memory beside its tiles; every tensor-core schedule the model lists for
// it (the best included) must fit what the printer declares, which counts
// the statistics of the decomposed body.
func TestNormPrologueSchedulesPrint(t *testing.T) {
	dev, err := cost.LookupDevice("h100")
	require.NoError(t, err)
	m := cost.NewModel(dev, cost.Defaults(dev))
	for name, norm := range map[string]func(b *ir.Builder, x ir.Value) ir.Value{
		"rmsnorm": func(b *ir.Builder, x ir.Value) ir.Value { return b.RMSNorm(x, b.Input("$2", ir.BF16, 1024), 1e-5) },
		"layernorm": func(b *ir.Builder, x ir.Value) ir.Value {
			return b.LayerNorm(x, b.Input("$2", ir.BF16, 1024), b.Input("$3", ir.BF16, 1024), 1e-5)
		},
	} {
		b := ir.NewBuilder("kernel")
		x, w := b.Input("$0", ir.BF16, 512, 1024), b.Input("$1", ir.BF16, 1024, 1024)
		b.Output("out0", b.MatMul(norm(b, x), w))
		body, err := b.Build()
		require.NoError(t, err)
		ranked, err := m.Ranked(body)
		require.NoError(t, err, name)
		tensor := 0
		for _, e := range ranked {
			if !e.Schedule.Tensor {
				continue
			}
			tensor++
			_, err := PrintKernelWith("k", name, body, e.Schedule)
			assert.NoError(t, err, "%s: %s", name, e.Schedule)
		}
		assert.Positive(t, tensor, "%s: tensor-core schedules listed", name)
	}
}
