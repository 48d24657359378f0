package cuda

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
)

// TestTensorCoreQuantTiles: a tensor-core matmul over a quantized weight
// decodes its B tiles from whole loads of codes (tensorcore_quant.go) in
// every format, in bf16 and f16, under tile shapes whose tasks fill the
// threads evenly, unevenly and twice, pipelines two to four deep, and an
// N past the last tile's columns (the rows past N zero-filled); each
// matches the reference under the emulation. An error planted in each
// format's decode (e2m1's nibbles swapped, e8m0's bias off by one, an
// e4m3 code's sign, AWQ's words read in sequential order, GPTQ's zero
// point taken as stored) is caught by the verification.
func TestTensorCoreQuantTiles(t *testing.T) {
	needGXX(t)
	t.Parallel()
	schedules := []cost.Schedule{
		{BM: 64, BN: 64, BK: 32, Threads: 128, Stages: 2, Tensor: true},
		{BM: 32, BN: 64, BK: 32, Threads: 64, Stages: 3, Tensor: true},
		{BM: 16, BN: 32, BK: 32, Threads: 32, Stages: 4, Tensor: true},
		{BM: 64, BN: 128, BK: 32, Threads: 256, Stages: 2, Tensor: true},
	}
	f16Scales := func(f quant.Format) func(t *testing.T, dt ir.DType) *ir.Graph {
		return func(t *testing.T, dt ir.DType) *ir.Graph { return dequantMatmul(t, f, dt, 40, 128, 96) }
	}
	f32Scales := func(f quant.Format) func(t *testing.T, dt ir.DType) *ir.Graph {
		return func(t *testing.T, dt ir.DType) *ir.Graph {
			return quantLinearBody(t, f, dt, ir.F32, 40, 128, 96, 32, 0)
		}
	}
	groups := func(f quant.Format, group, groupN int) func(t *testing.T, dt ir.DType) *ir.Graph {
		return func(t *testing.T, dt ir.DType) *ir.Graph {
			return quantLinearBody(t, f, dt, ir.F16, 40, 128, 96, group, groupN)
		}
	}
	type plantCase struct {
		f        quant.Format
		what     string
		body     func(t *testing.T, dt ir.DType) *ir.Graph
		old, bad string // a planted error: every old in the kernel becomes bad
	}
	var good, planted []*Kernel
	var bodies []*ir.Graph
	var names []string
	var cases []plantCase // each kernel's
	for ci, c := range []plantCase{
		{quant.MXFP4, "nibbles", f16Scales(quant.MXFP4), "2 * (i % 4)) * sc", "2 * (i % 4) ^ 1) * sc"},
		{quant.MXFP4, "e8m0", f16Scales(quant.MXFP4), "lum_e8m0_to_f32(qs[j])", "2.0f * lum_e8m0_to_f32(qs[j])"},
		{quant.FP8, "sign", f16Scales(quant.FP8), "lum_e4m3_in(qw4[i / 2], i % 2 * 2)", "-lum_e4m3_in(qw4[i / 2], i % 2 * 2)"},
		{quant.AWQ, "order", f16Scales(quant.AWQ), "(unsigned)((c >> 2) | (c & 1) << 1)", "(unsigned)(c & 3)"},
		{quant.GPTQ, "zero", f16Scales(quant.GPTQ), "129u", "128u"},
		{quant.AWQ, "f32-scales", f32Scales(quant.AWQ), "hi ? ah : al", "hi ? al : ah"},
		{quant.GPTQ, "f32-scales", f32Scales(quant.GPTQ), "(lum_q4_128(lo, (unsigned)i) - zf)", "(lum_q4_128(hi, (unsigned)i) - zf)"},
		// Other groups: fp8 per channel (one scale a row, Group = K) and
		// in 64 x 32 blocks, awq and gptq in groups of 64.
		{quant.FP8, "per-channel", groups(quant.FP8, 128, 1), "i % 2 * 2) * qs[j]", "i % 2 * 2) * -qs[j]"},
		{quant.FP8, "blocks", groups(quant.FP8, 32, 64), "i % 2 * 2) * qs[j]", "i % 2 * 2) * -qs[j]"},
		{quant.AWQ, "group64", groups(quant.AWQ, 64, 0), "hi ? ah : al", "hi ? al : ah"},
		{quant.GPTQ, "group64", groups(quant.GPTQ, 64, 0), "129u", "128u"},
	} {
		for _, dt := range []ir.DType{ir.BF16, ir.F16} {
			for i, s := range schedules {
				if testing.Short() && (dt == ir.F16 || i != ci%len(schedules)) {
					continue // the long command takes every pair; -short one schedule a case, in turn
				}
				name := fmt.Sprintf("%s/%s/%s/s%d", c.f, c.what, dt, i)
				body := c.body(t, dt)
				k, err := PrintKernelWith(fmt.Sprintf("tcq%d", len(good)), "a quantized weight on tensor cores", body, s)
				require.NoError(t, err, name)
				require.Contains(t, k.Text, "lum_mma_m16n8k16_", "%s: the tensor-core path", name)
				require.NotContains(t, k.Text, "const float lo =", "%s: no value of B computed through the scalar prologue", name)
				require.Contains(t, k.Text, c.old, name)
				bad := *k
				bad.Name = k.Name + "_bad"
				bad.Text = strings.ReplaceAll(strings.Replace(k.Text, "void "+k.Name+"(", "void "+bad.Name+"(", 1), c.old, c.bad)
				good, planted, bodies, names, cases = append(good, k), append(planted, &bad), append(bodies, body), append(names, name), append(cases, c)
			}
		}
	}
	// One verification of them all (one compilation under the
	// emulation): every kernel matches, every planted error is caught.
	checks, err := VerifyKernels(context.Background(), append(good, planted...), append(bodies, bodies...), VerifyOptions{Seed: 7})
	require.Len(t, checks, 2*len(good), "%v", err)
	for i, name := range names {
		require.Nil(t, checks[i].Mismatch, "%s", name)
		require.Positive(t, checks[i].Elements, "%s", name)
		require.NotNil(t, checks[len(good)+i].Mismatch, "%s: the planted error %q -> %q", name, cases[i].old, cases[i].bad)
	}
}

// TestTensorCoreQuantHugeScales: an awq or gptq weight whose bf16 scale
// is past 2^121 (where (128 + z) s, the matrix-vector kernel's biased zero
// point, overflows f32) decodes as the reference does, its code less its
// zero point times its scale.
func TestTensorCoreQuantHugeScales(t *testing.T) {
	needGXX(t)
	for _, f := range []quant.Format{quant.AWQ, quant.GPTQ} {
		t.Run(f.String(), func(t *testing.T) {
			body := quantLinearBody(t, f, ir.BF16, ir.BF16, 16, 64, 32, 32, 0)
			k, err := PrintKernelWith("tcq_huge", "", body, cost.Schedule{BM: 16, BN: 32, BK: 32, Threads: 32, Stages: 2, Tensor: true})
			require.NoError(t, err)
			feeds, err := ir.RandomFeeds(body, 4, ir.Typical)
			require.NoError(t, err)
			// x scaled by 2^-120 and the first group's scales of the
			// first eight columns by 2^122: those products stay near 1.
			x, sc := feeds["$0"], feeds["$2"]
			for i := range x.Len() {
				x.Set(i, math.Ldexp(x.At(i), -120))
			}
			for c := range int64(8) {
				sc.Set(c, math.Ldexp(1+float64(c)/8, 122))
			}
			want, err := ir.Eval(context.Background(), body, feeds, ir.EvalOptions{Magnitude: true})
			require.NoError(t, err)
			in := []*ir.Tensor{feeds["$0"], feeds["$1"], feeds["$2"], feeds["$3"]}
			outs, err := Emulate(context.Background(), []*Kernel{k}, [][]*ir.Tensor{in}, [][]ir.ValueType{{{Shape: ir.Shape{16, 32}, DType: ir.BF16}}}, emu.Options{})
			require.NoError(t, err)
			o := body.Outputs[0].Name
			mm, err := ir.Compare(outs[0][0], want.Outputs[o], want.Magnitudes[o], 64)
			require.NoError(t, err)
			require.Nil(t, mm)
			require.Greater(t, math.Abs(want.Outputs[o].At(0)), 1e-3, "the huge scales' products are the output's size")
		})
	}
}

// A weight whose tiles would straddle its scale groups, or whose K is no
// multiple of the tile's 32, is computed through the scalar prologue
// (cost.TileQuantOperand), and still matches the reference.
func TestTensorCoreQuantFallsBack(t *testing.T) {
	needGXX(t)
	body := buildBody(t, func(b *ir.Builder) ir.Value {
		x := b.Input("$0", ir.BF16, 24, 48)
		w := b.Dequant(quant.AWQ, ir.BF16, 16, 0, b.Input("$1", ir.I32, 48, 4), b.Input("$2", ir.F16, 3, 32), b.Input("$3", ir.I32, 3, 4))
		return b.MatMul(x, w)
	})
	_, ok := cost.TileQuantOperand(body, body.Node(body.Outputs[0].Value).Inputs[1], ir.BF16, 48)
	require.False(t, ok, "groups of 16 and K 48")
	k, err := PrintKernelWith("tcq_scalar", "", body, cost.Schedule{BM: 32, BN: 32, BK: 32, Threads: 32, Stages: 2, Tensor: true})
	require.NoError(t, err)
	require.Contains(t, k.Text, "const float lo =")
	// A schedule that would give a thread more than TileQuantMaxTasks
	// tasks (their registers would spill) reads the weight per element.
	awq := dequantMatmul(t, quant.AWQ, ir.BF16, 40, 128, 96)
	wide := cost.Schedule{BM: 64, BN: 128, BK: 32, Threads: 64, Stages: 3, Warp: 64, Tensor: true}
	_, ok = cost.TileQuantOperand(awq, awq.Node(awq.Outputs[0].Value).Inputs[1], ir.BF16, 128)
	require.True(t, ok)
	require.Greater(t, cost.TileQuantTasks(wide), cost.TileQuantMaxTasks)
	k2, err := PrintKernelWith("tcq_wide", "", awq, wide)
	require.NoError(t, err)
	require.Contains(t, k2.Text, "const float lo =")
	_, err = VerifyKernels(context.Background(), []*Kernel{k, k2}, []*ir.Graph{body, awq}, VerifyOptions{Seed: 2})
	require.NoError(t, err)
}

// TestNVRTCCompilesTensorCoreQuant: the quantized tile kernels compile
// for sm_80 and sm_90 at a projection's real shape (4096 x 4096, 512
// rows) under the listed tensor schedules, with no spill and no stack
// frame: the registers a tile waits in stay registers.
func TestNVRTCCompilesTensorCoreQuant(t *testing.T) {
	t.Parallel()
	lib := nvrtcOrSkip(t)
	schedules := []cost.Schedule{
		{BM: 64, BN: 64, BK: 32, Threads: 128, Stages: 2, Tensor: true},
		{BM: 128, BN: 128, BK: 32, Threads: 128, Stages: 3, Warp: 64, Tensor: true},
		{BM: 128, BN: 256, BK: 32, Threads: 256, Stages: 2, Warp: 64, Tensor: true},
		{BM: 128, BN: 64, BK: 32, Threads: 64, Stages: 4, Warp: 64, Tensor: true}, // two tasks a thread
	}
	if testing.Short() {
		schedules = schedules[1:2]
	}
	var kernels []*Kernel
	for _, f := range []quant.Format{quant.MXFP4, quant.FP8, quant.AWQ, quant.GPTQ} {
		body := dequantMatmul(t, f, ir.BF16, 512, 4096, 4096)
		for i, s := range schedules {
			k, err := PrintKernelWith(fmt.Sprintf("tcq_%s_%d", f, i), "", body, s)
			require.NoError(t, err)
			kernels = append(kernels, k)
		}
	}
	archs := []string{"sm_80", "sm_90"}
	if testing.Short() {
		archs = archs[1:]
	}
	for _, arch := range archs {
		res, err := lib.Compile(context.Background(), NVRTCPrelude+Source(kernels), "kernels.cu", nvrtc.Options{Arch: arch})
		require.NoError(t, err, arch)
		for _, k := range kernels {
			r, ok := res.Kernels[k.Name]
			require.True(t, ok, "%s: no resources for %s", arch, k.Name)
			t.Logf("%s %s (%s): %d registers, %d main-loop instructions", arch, k.Name, k.Schedule, r.Registers, MainLoopInstructions(res.PTX, k.Name))
			assert.Zero(t, r.SpillStores, "%s: %s spills", arch, k.Name)
			assert.Zero(t, r.StackBytes, "%s: %s has a stack frame", arch, k.Name)
		}
	}
}
