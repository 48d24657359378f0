package cuda

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// quantLinearBody is x [M, K] times a weight of N columns quantized in
// format f with groups of group (fp8: groupN × group blocks; gptq and awq
// scales of dtype sdt), its values and x of dtype dt: [N, K] read
// transposed for mxfp4 and fp8, [K, N] for awq and gptq, as their
// checkpoints store them.
func quantLinearBody(t testing.TB, f quant.Format, dt, sdt ir.DType, M, K, N, group, groupN int) *ir.Graph {
	return buildBody(t, func(b *ir.Builder) ir.Value {
		x := b.Input("$0", dt, ir.Dim(M), ir.Dim(K))
		var w ir.Value
		switch f {
		case quant.MXFP4:
			w = b.Permute(b.Dequant(f, dt, 32, 0, b.Input("$1", ir.U8, ir.Dim(N), ir.Dim(K/32), 16), b.Input("$2", ir.U8, ir.Dim(N), ir.Dim(K/32))), 1, 0)
		case quant.FP8:
			sn, sk := (N+groupN-1)/groupN, (K+group-1)/group
			w = b.Permute(b.Dequant(f, dt, int64(group), int64(groupN), b.Input("$1", ir.U8, ir.Dim(N), ir.Dim(K)), b.Input("$2", ir.F32, ir.Dim(sn), ir.Dim(sk))), 1, 0)
		case quant.AWQ:
			w = b.Dequant(f, dt, int64(group), 0, b.Input("$1", ir.I32, ir.Dim(K), ir.Dim(N/8)), b.Input("$2", sdt, ir.Dim(K/group), ir.Dim(N)), b.Input("$3", ir.I32, ir.Dim(K/group), ir.Dim(N/8)))
		default:
			w = b.Dequant(f, dt, int64(group), 0, b.Input("$1", ir.I32, ir.Dim(K/8), ir.Dim(N)), b.Input("$2", sdt, ir.Dim(K/group), ir.Dim(N)), b.Input("$3", ir.I32, ir.Dim(K/group), ir.Dim(N/8)))
		}
		return b.MatMul(x, w)
	})
}

// quantMergedBody is x [M, K] times the weights of a merged projection
// side by side (a concatenation along the columns of ns columns each),
// quantized as quantLinearBody quantizes one, each part its own
// arguments.
func quantMergedBody(t testing.TB, f quant.Format, dt, sdt ir.DType, M, K int, ns []int, group, groupN int) *ir.Graph {
	return quantMerged(t, f, dt, sdt, M, K, ns, group, groupN, false)
}

// quantGateUpBody is a merged gate and up projection of N columns each
// over quantized weights (quantMergedBody), the SiLU of the gate times
// the up projection its epilogue: a gathered one (cost's gather.go).
func quantGateUpBody(t testing.TB, f quant.Format, dt, sdt ir.DType, M, K, N, group, groupN int) *ir.Graph {
	return quantMerged(t, f, dt, sdt, M, K, []int{N, N}, group, groupN, true)
}

func quantMerged(t testing.TB, f quant.Format, dt, sdt ir.DType, M, K int, ns []int, group, groupN int, gateUp bool) *ir.Graph {
	return buildBody(t, func(b *ir.Builder) ir.Value {
		x := b.Input("$0", dt, ir.Dim(M), ir.Dim(K))
		arg := 1
		in := func(dt ir.DType, shape ...int) ir.Value {
			dims := make([]ir.Dim, len(shape))
			for i, d := range shape {
				dims[i] = ir.Dim(d)
			}
			arg++
			return b.Input(fmt.Sprintf("$%d", arg-1), dt, dims...)
		}
		var parts []ir.Value
		for _, N := range ns {
			var w ir.Value
			switch f {
			case quant.MXFP4:
				w = b.Permute(b.Dequant(f, dt, 32, 0, in(ir.U8, N, K/32, 16), in(ir.U8, N, K/32)), 1, 0)
			case quant.FP8:
				w = b.Permute(b.Dequant(f, dt, int64(group), int64(groupN), in(ir.U8, N, K), in(ir.F32, (N+groupN-1)/groupN, (K+group-1)/group)), 1, 0)
			case quant.AWQ:
				w = b.Dequant(f, dt, int64(group), 0, in(ir.I32, K, N/8), in(sdt, K/group, N), in(ir.I32, K/group, N/8))
			default:
				w = b.Dequant(f, dt, int64(group), 0, in(ir.I32, K/8, N), in(sdt, K/group, N), in(ir.I32, K/group, N/8))
			}
			parts = append(parts, w)
		}
		mm := b.MatMul(x, b.Concat(1, parts...))
		if !gateUp {
			return mm
		}
		N := int64(ns[0])
		g := b.Slice(mm, 1, 0, N, 1)
		return b.Mul(b.Mul(g, b.Sigmoid(g)), b.Slice(mm, 1, N, 2*N, 1))
	})
}

// quantGEMVBodies are decode projections over quantized weights of each
// format, in bf16 at one row and f32 at four (mxfp4 in f16 too, whose
// products round, and at eight rows), N no block width divides, K over one
// or two chunks of A, merged projections of each format (parts no block
// width divides), and merged gate and up projections whose epilogue
// gathers the SiLU product:
// fp8 per channel and in 128 × 128 blocks, awq and gptq with f16 scales
// and groups of 64 and 128 (awq with f32 scales, gptq with bf16 ones,
// awq at three rows, whose lanes load 8 bytes).
func quantGEMVBodies(t testing.TB) map[string]*ir.Graph {
	return map[string]*ir.Graph{
		"mxfp4_bf16_m1":          quantLinearBody(t, quant.MXFP4, ir.BF16, 0, 1, 2048, 40, 32, 0),
		"mxfp4_f32_m4":           quantLinearBody(t, quant.MXFP4, ir.F32, 0, 4, 3072, 37, 32, 0),
		"mxfp4_f16_m2":           quantLinearBody(t, quant.MXFP4, ir.F16, 0, 2, 1024, 19, 32, 0),
		"mxfp4_f32_m8":           quantLinearBody(t, quant.MXFP4, ir.F32, 0, 8, 2048, 20, 32, 0),
		"fp8_bf16_m1_channel":    quantLinearBody(t, quant.FP8, ir.BF16, 0, 1, 2048, 40, 2048, 1),
		"fp8_f32_m4_block128":    quantLinearBody(t, quant.FP8, ir.F32, 0, 4, 2560, 300, 128, 128),
		"awq_bf16_m1_g128":       quantLinearBody(t, quant.AWQ, ir.BF16, ir.F16, 1, 1024, 96, 128, 0),
		"awq_f32_m4_g64_f32s":    quantLinearBody(t, quant.AWQ, ir.F32, ir.F32, 4, 2304, 160, 64, 0),
		"awq_f32_m2_g128":        quantLinearBody(t, quant.AWQ, ir.F32, ir.F16, 2, 2304, 96, 128, 0),
		"awq_bf16_m3_g64":        quantLinearBody(t, quant.AWQ, ir.BF16, ir.F16, 3, 1024, 64, 64, 0),
		"gptq_bf16_m1_g128":      quantLinearBody(t, quant.GPTQ, ir.BF16, ir.F16, 1, 1024, 72, 128, 0),
		"gptq_f32_m4_g128":       quantLinearBody(t, quant.GPTQ, ir.F32, ir.F16, 4, 2304, 40, 128, 0),
		"gptq_bf16_m4_g64_bf16s": quantLinearBody(t, quant.GPTQ, ir.BF16, ir.BF16, 4, 1024, 48, 64, 0),
		// Merged projections: Q, K and V side by side (two parts for awq
		// and gptq, whose three take more arguments than a kernel).
		"merged_mxfp4_bf16_m1": quantMergedBody(t, quant.MXFP4, ir.BF16, 0, 1, 1024, []int{24, 8, 9}, 32, 0),
		"merged_fp8_f32_m2":    quantMergedBody(t, quant.FP8, ir.F32, 0, 2, 1280, []int{20, 12, 12}, 128, 8),
		"merged_awq_bf16_m1":   quantMergedBody(t, quant.AWQ, ir.BF16, ir.F16, 1, 1024, []int{64, 32}, 128, 0),
		"merged_gptq_f32_m3":   quantMergedBody(t, quant.GPTQ, ir.F32, ir.F16, 3, 1024, []int{24, 16}, 64, 0),
		// Merged gate and up projections, the SiLU product gathered in
		// the epilogue.
		"gate_up_mxfp4_bf16_m1": quantGateUpBody(t, quant.MXFP4, ir.BF16, 0, 1, 1024, 24, 32, 0),
		"gate_up_awq_bf16_m1":   quantGateUpBody(t, quant.AWQ, ir.BF16, ir.F16, 1, 1024, 64, 128, 0),
		"gate_up_gptq_f32_m2":   quantGateUpBody(t, quant.GPTQ, ir.F32, ir.F16, 2, 1024, 32, 64, 0),
	}
}

// quantGEMVKernels prints every body under every matrix-vector schedule
// the h100-sxm model lists for it.
func quantGEMVKernels(t *testing.T, bodies map[string]*ir.Graph) ([]*Kernel, []*ir.Graph) {
	dev, err := cost.LookupDevice("h100-sxm")
	require.NoError(t, err)
	model := cost.NewModel(dev, cost.Defaults(dev))
	var kernels []*Kernel
	var of []*ir.Graph
	for _, name := range sortedNames(bodies) {
		ranked, err := model.Ranked(bodies[name])
		require.NoError(t, err, name)
		n := 0
		for _, e := range ranked {
			if !e.Schedule.GEMV {
				continue
			}
			k, err := PrintKernelWith(fmt.Sprintf("q_%s_%d", name, n), name+" "+e.Schedule.String(), bodies[name], e.Schedule)
			require.NoError(t, err, "%s %s", name, e.Schedule)
			kernels, of = append(kernels, k), append(of, bodies[name])
			n++
		}
		require.NotZero(t, n, "%s: the model lists no matrix-vector schedule", name)
	}
	return kernels, of
}

// TestEmulatedQuantGEMVMatchesReference runs every matrix-vector schedule
// of every quantized body under the emulation (in order, and with shuffled
// threads) on random packed operands that mean what a checkpoint's do,
// against the reference interpreter's float64 evaluation of the
// dequantized weight, within the verifier's allowance.
func TestEmulatedQuantGEMVMatchesReference(t *testing.T) {
	t.Parallel()
	needGXX(t)
	kernels, bodies := quantGEMVKernels(t, quantGEMVBodies(t))
	if testing.Short() {
		// Each body's best schedule: every
		// layout and format still runs; all of them in the long command.
		var ks []*Kernel
		var bs []*ir.Graph
		for i, k := range kernels {
			var n int
			if _, err := fmt.Sscanf(k.Name[strings.LastIndexByte(k.Name, '_')+1:], "%d", &n); err == nil && n >= 1 {
				continue
			}
			ks, bs = append(ks, k), append(bs, bodies[i])
		}
		kernels, bodies = ks, bs
	}
	args, outs, wants := referenceRuns(t, bodies, 41)
	opts := []emu.Options{{}, {Shuffle: true, Seed: 7}}
	if testing.Short() {
		opts = opts[1:]
	}
	for _, opt := range opts {
		got, err := Emulate(context.Background(), kernels, args, outs, opt)
		require.NoError(t, err)
		for i, k := range kernels {
			mm := compareOutput(t, bodies[i], 0, got[i][0], wants[i])
			require.Nil(t, mm, "%s (%s), shuffled %v: %v", k.Name, k.Schedule, opt.Shuffle, mm)
		}
	}
	t.Logf("%d kernels", len(kernels))
}

// TestEmulatedQuantGEMVUnfusedSlabs: where a column's biased zero point
// overflows (a bf16 scale past 2^121: -(128 + z) s is no f32), its slabs
// decode as the reference does rather than by the fused multiply-add,
// which would give NaN. Every listed schedule of an awq and a gptq body
// with such a scale (A scaled down so that the sums stay finite) matches
// the reference under the emulation.
func TestEmulatedQuantGEMVUnfusedSlabs(t *testing.T) {
	t.Parallel()
	needGXX(t)
	bodies := map[string]*ir.Graph{
		"awq":  quantLinearBody(t, quant.AWQ, ir.BF16, ir.BF16, 1, 1024, 64, 64, 0),
		"gptq": quantLinearBody(t, quant.GPTQ, ir.BF16, ir.BF16, 1, 1024, 64, 64, 0),
	}
	kernels, of := quantGEMVKernels(t, bodies)
	var args [][]*ir.Tensor
	var outs [][]ir.ValueType
	var wants []*ir.Result
	for i, body := range of {
		feeds, err := ir.RandomFeeds(body, uint64(i)+3, ir.Typical)
		require.NoError(t, err)
		x, scales := feeds["$0"], feeds["$2"]
		for j := range x.Len() {
			x.Set(j, math.Ldexp(x.At(j), -100))
		}
		// Group 1's first eight columns.
		for c := range int64(8) {
			scales.Set(64+c, 3e36)
		}
		want, err := ir.Eval(context.Background(), body, feeds, ir.EvalOptions{Magnitude: true})
		require.NoError(t, err)
		args = append(args, []*ir.Tensor{x, feeds["$1"], scales, feeds["$3"]})
		outs = append(outs, []ir.ValueType{{Shape: body.Node(body.Outputs[0].Value).Shape, DType: ir.BF16}})
		wants = append(wants, want)
	}
	got, err := Emulate(context.Background(), kernels, args, outs, emu.Options{Shuffle: true, Seed: 5})
	require.NoError(t, err)
	for i, k := range kernels {
		require.False(t, math.IsNaN(wants[i].Outputs["out0"].At(0)), "the reference's sums are finite")
		mm := compareOutput(t, of[i], 0, got[i][0], wants[i])
		require.Nil(t, mm, "%s (%s): %v", k.Name, k.Schedule, mm)
	}
}

// TestQuantGEMVSchedulesMatchPrinter: every quantized body gets
// matrix-vector schedules of each layout the model lists, and each prints
// with the grid and block the features price and the group of loads
// GEMVLoop prices; no byte of a dequantized weight is stored.
func TestQuantGEMVSchedulesMatchPrinter(t *testing.T) {
	dev, err := cost.LookupDevice("h100-sxm")
	require.NoError(t, err)
	model := cost.NewModel(dev, cost.Defaults(dev))
	bodies := quantGEMVBodies(t)
	for _, name := range sortedNames(bodies) {
		body := bodies[name]
		ranked, err := model.Ranked(body)
		require.NoError(t, err, name)
		n := 0
		for _, e := range ranked {
			s := e.Schedule
			if !s.GEMV {
				continue
			}
			n++
			k, err := PrintKernelWith("g", "", body, s)
			require.NoError(t, err, "%s %s", name, s)
			loads, _, _, ok := cost.GEMVLoop(body, matmulOf(body), s)
			require.True(t, ok, "%s %s", name, s)
			q, ok := cost.GEMVQuantWeight(body, matmulOf(body))
			require.True(t, ok, name)
			cols, word := 1, "uint4"
			if q.KContiguous() {
				cols, _, _ = cost.GEMVLayout(s)
			}
			if q.LoadBytes() == 8 {
				word = "uint2"
			}
			assert.Contains(t, k.Text, fmt.Sprintf("%s w[%d][%d];", word, s.Stages, cols), "%s %s", name, s)
			assert.Equal(t, loads, s.Stages*cols, "%s %s", name, s)
			assert.Equal(t, e.Features.Blocks, k.Grid[0]*k.Grid[1]*k.Grid[2], "%s %s", name, s)
			assert.Equal(t, e.Features.WarpsPerBlock*32, k.Block[0], "%s %s", name, s)
			assert.NotContains(t, k.Text, "lum_f32_to_bf16(acc", "%s %s", name, s)
		}
		assert.Positive(t, n, name)
	}
}

// editAll replaces every match of re in k's text by repl (a function of
// the match), as a planted error: at least one match.
func editAll(t *testing.T, k *Kernel, name string, re *regexp.Regexp, repl func(string) string) *Kernel {
	t.Helper()
	require.True(t, re.MatchString(k.Text), "%s: no match of %s\n%s", k.Name, re, k.Text)
	c := *k
	c.Name = name
	c.Text = strings.Replace(re.ReplaceAllStringFunc(k.Text, repl), "void "+k.Name+"(", "void "+name+"(", 1)
	require.NotEqual(t, k.Text, c.Text)
	return &c
}

// plantedQuantKernel is body's kernel under the h100-sxm model's best
// matrix-vector schedule, which verification accepts.
func plantedQuantKernel(t *testing.T, name string, body *ir.Graph) *Kernel {
	t.Helper()
	dev, err := cost.LookupDevice("h100-sxm")
	require.NoError(t, err)
	ranked, err := cost.NewModel(dev, cost.Defaults(dev)).Ranked(body)
	require.NoError(t, err)
	require.NotEmpty(t, ranked)
	require.True(t, ranked[0].Schedule.GEMV, "the best schedule of %s: %s", name, ranked[0].Schedule)
	k, err := PrintKernelWith(name, name, body, ranked[0].Schedule)
	require.NoError(t, err)
	_, err = VerifyKernels(context.Background(), []*Kernel{k}, []*ir.Graph{body}, VerifyOptions{Seed: 3})
	require.NoError(t, err, "the kernel as printed")
	return k
}

// verifyRefuses holds that verification refuses a kernel with a planted
// error, naming it.
func verifyRefuses(t *testing.T, bad *Kernel, body *ir.Graph) {
	t.Helper()
	_, err := VerifyKernels(context.Background(), []*Kernel{bad}, []*ir.Graph{body}, VerifyOptions{Seed: 3})
	require.Error(t, err, "verification accepted %s", bad.Name)
	assert.Contains(t, err.Error(), bad.Name)
	t.Log(err)
}

// TestVerifyRefusesMXFP4NibbleOrderSwapped: an mxfp4 kernel that takes a
// byte's high nibble for the even k (and the low one for the odd) fails
// verification.
func TestVerifyRefusesMXFP4NibbleOrderSwapped(t *testing.T) {
	t.Parallel()
	needGXX(t)
	body := quantLinearBody(t, quant.MXFP4, ir.BF16, 0, 1, 1024, 24, 32, 0)
	k := plantedQuantKernel(t, "mxfp4_nibbles", body)
	shift := regexp.MustCompile(`lum_e2m1_top\(x( << \d+)?\)`)
	bad := editAll(t, k, "mxfp4_nibbles_swapped", shift, func(m string) string {
		s := 0
		if _, err := fmt.Sscanf(m, "lum_e2m1_top(x << %d)", &s); err != nil {
			s = 0
		}
		j := (28 - s) / 4 // the nibble the code reads
		if s = 28 - 4*(j^1); s == 0 {
			return "lum_e2m1_top(x)"
		}
		return fmt.Sprintf("lum_e2m1_top(x << %d)", s)
	})
	verifyRefuses(t, bad, body)
}

// TestVerifyRefusesE8M0BiasOffByOne: an mxfp4 kernel whose e8m0 scales
// are 2^(s − 126), twice the true ones, fails verification.
func TestVerifyRefusesE8M0BiasOffByOne(t *testing.T) {
	t.Parallel()
	needGXX(t)
	body := quantLinearBody(t, quant.MXFP4, ir.F32, 0, 4, 1024, 24, 32, 0)
	k := plantedQuantKernel(t, "e8m0_bias", body)
	scale := regexp.MustCompile(`lum_e8m0_to_f32\((s1?\[u\]\[c\])\)`)
	bad := editAll(t, k, "e8m0_bias_off", scale, func(m string) string {
		return strings.Replace(m, "])", "] + 1u)", 1)
	})
	verifyRefuses(t, bad, body)
}

// TestVerifyRefusesAWQSequentialOrder: an awq kernel that reads a word's
// columns in sequential order (column j at bits 4j) rather than AWQ's
// interleave fails verification.
func TestVerifyRefusesAWQSequentialOrder(t *testing.T) {
	t.Parallel()
	needGXX(t)
	body := quantLinearBody(t, quant.AWQ, ir.BF16, ir.F16, 1, 512, 64, 128, 0)
	k := plantedQuantKernel(t, "awq_order", body)
	// Column col's value: nibble col is de's byte col/2 (even) or dd's
	// (odd).
	// Either decode (the fused one, and the reference's where a scale is
	// not finite).
	value := regexp.MustCompile(`lum_q4_(byte|fma)\((de|dd), \du(\) \* |, )sc\[8 \* h \+ (\d)\]`)
	bad := editAll(t, k, "awq_sequential", value, func(m string) string {
		sub := value.FindStringSubmatch(m)
		col := int(sub[4][0] - '0')
		d := "de"
		if col%2 == 1 {
			d = "dd"
		}
		return fmt.Sprintf("lum_q4_%s(%s, %du%ssc[8 * h + %d]", sub[1], d, col/2, sub[3], col)
	})
	verifyRefuses(t, bad, body)
}

// codeLoad is a vector load of codes in PTX: 16 bytes, or 8 for awq's
// 16-column lanes.
var codeLoad = regexp.MustCompile(`ld\.global(\.nc)?\.v[24]\.u32`)

// TestNVRTCCompilesQuantGEMV compiles the quantized matrix-vector kernels
// for sm_90: no spills, no stack frame, no local memory, and where the
// kernel keeps a main loop, the group of code loads GEMVLoop prices in
// one basic block of it. Under -short each body's first three schedules;
// the long test command compiles every listed one.
func TestNVRTCCompilesQuantGEMV(t *testing.T) {
	t.Parallel()
	lib := nvrtcOrSkip(t)
	all, allBodies := quantGEMVKernels(t, quantGEMVBodies(t))
	var kernels []*Kernel
	var bodies []*ir.Graph
	for i, k := range all {
		var n int
		if _, err := fmt.Sscanf(k.Name[strings.LastIndexByte(k.Name, '_')+1:], "%d", &n); err == nil && testing.Short() && n >= 1 {
			continue
		}
		kernels, bodies = append(kernels, k), append(bodies, allBodies[i])
	}
	res, err := lib.Compile(context.Background(), NVRTCPrelude+Source(kernels), "kernels.cu", nvrtc.Options{Arch: "sm_90"})
	require.NoError(t, err)
	loops := 0
	for i, k := range kernels {
		r, ok := res.Kernels[k.Name]
		require.True(t, ok, "no resources for %s", k.Name)
		assert.Zero(t, r.SpillStores+r.SpillLoads, "%s (%s) spills", k.Name, k.Schedule)
		assert.Zero(t, r.StackBytes, "%s (%s) has a stack frame", k.Name, k.Schedule)
		entry := ptxEntry(res.PTX, k.Name)
		require.NotEmpty(t, entry, k.Name)
		assert.NotContains(t, entry, ".local", "%s: local memory", k.Name)
		loads, _, _, ok := cost.GEMVLoop(bodies[i], matmulOf(bodies[i]), k.Schedule)
		require.True(t, ok, k.Name)
		if loop := mainLoop(entry, false); loop != "" {
			loops++
			best, run := 0, 0
			for _, line := range strings.Split(loop, "\n") {
				switch line = strings.TrimSpace(line); {
				case codeLoad.MatchString(line):
					run++
					best = max(best, run)
				case strings.HasPrefix(line, "$") || strings.Contains(line, "bra"):
					run = 0
				}
			}
			assert.Equal(t, loads, best, "%s (%s): the main loop's group of code loads", k.Name, k.Schedule)
		}
	}
	assert.Positive(t, loops, "no kernel kept a main loop")
	t.Logf("%d kernels, %d with a main loop", len(kernels), loops)
}

// TestQuantGEMVLoopMixMatchesPTX: the instruction mix cost.GEMVLoop
// estimates for a quantized matrix-vector schedule's main loop agrees
// with LoopMix's count of the loop in NVRTC's PTX, pipe by pipe, at a
// decode projection's K (4096, the loop kept; 8192 over chunks of A at
// three rows), for each format, layout, rounding and decode (awq's and
// gptq's fused multiply-add, or f32 scales' subtraction and product).
func TestQuantGEMVLoopMixMatchesPTX(t *testing.T) {
	if testing.Short() {
		t.Skip("the model's loop against NVRTC's PTX at every quantized layout: the long test command")
	}
	lib := nvrtcOrSkip(t)
	const K = 4096
	cases := []struct {
		name string
		body *ir.Graph
		s    cost.Schedule
	}{
		{"mxfp4 bf16, two columns", quantLinearBody(t, quant.MXFP4, ir.BF16, 0, 1, K, 64, 32, 0), cost.Schedule{BM: 1, BN: 8, Threads: 128, Stages: 2, TM: 2, GEMV: true}},
		{"mxfp4 f16 (rounded), three rows", quantLinearBody(t, quant.MXFP4, ir.F16, 0, 3, 2*K, 64, 32, 0), cost.Schedule{BM: 3, BN: 4, Threads: 128, Stages: 2, TM: 1, GEMV: true}},
		{"fp8 bf16 per channel", quantLinearBody(t, quant.FP8, ir.BF16, 0, 1, K, 64, K, 1), cost.Schedule{BM: 1, BN: 8, Threads: 128, Stages: 2, TM: 2, GEMV: true}},
		{"fp8 f32 blocks, four rows", quantLinearBody(t, quant.FP8, ir.F32, 0, 4, K, 256, 128, 128), cost.Schedule{BM: 4, BN: 8, Threads: 256, Stages: 2, TM: 1, GEMV: true}},
		{"awq bf16", quantLinearBody(t, quant.AWQ, ir.BF16, ir.F16, 1, K, 256, 128, 0), cost.Schedule{BM: 1, BN: 128, Threads: 256, Stages: 4, GEMV: true}},
		{"awq bf16, three rows (8-byte loads)", quantLinearBody(t, quant.AWQ, ir.BF16, ir.F16, 3, K, 256, 128, 0), cost.Schedule{BM: 3, BN: 64, Threads: 256, Stages: 4, GEMV: true}},
		{"gptq bf16", quantLinearBody(t, quant.GPTQ, ir.BF16, ir.F16, 1, K, 256, 128, 0), cost.Schedule{BM: 1, BN: 128, Threads: 256, Stages: 4, GEMV: true}},
		{"gptq f32, four rows", quantLinearBody(t, quant.GPTQ, ir.F32, ir.F16, 4, K, 256, 128, 0), cost.Schedule{BM: 4, BN: 64, Threads: 128, Stages: 2, GEMV: true}},
		{"awq bf16, one lane across (32 columns)", quantLinearBody(t, quant.AWQ, ir.BF16, ir.F16, 1, K, 256, 128, 0), cost.Schedule{BM: 1, BN: 32, Threads: 256, Stages: 4, GEMV: true}},
		{"awq f32 scales (unfused)", quantLinearBody(t, quant.AWQ, ir.BF16, ir.F32, 1, K, 256, 128, 0), cost.Schedule{BM: 1, BN: 64, Threads: 256, Stages: 4, GEMV: true}},
		{"gptq bf16, 8 columns", quantLinearBody(t, quant.GPTQ, ir.BF16, ir.F16, 1, K, 256, 128, 0), cost.Schedule{BM: 1, BN: 8, Threads: 128, Stages: 4, GEMV: true}},
	}
	var kernels []*Kernel
	for i, c := range cases {
		k, err := PrintKernelWith(fmt.Sprintf("qmix%d", i), c.name, c.body, c.s)
		require.NoError(t, err, c.name)
		kernels = append(kernels, k)
	}
	res, err := lib.Compile(context.Background(), NVRTCPrelude+Source(kernels), "kernels.cu", nvrtc.Options{Arch: "sm_90"})
	require.NoError(t, err)
	for i, c := range cases {
		_, _, est, ok := cost.GEMVLoop(c.body, matmulOf(c.body), c.s)
		require.True(t, ok, c.name)
		got := LoopMix(res.PTX, kernels[i].Name)
		require.Positive(t, got.Total(), "%s: no main loop", c.name)
		assert.Equal(t, got.Load, est.Load, "%s: global loads", c.name)
		assert.Equal(t, got.Shared, est.Shared, "%s: shared loads", c.name)
		assert.InDelta(t, got.FP, est.FP, 0.1*got.FP+2, "%s: FP (PTX %+v, estimate %+v)", c.name, got, est)
		assert.InDelta(t, got.Int, est.Int, 0.2*got.Int+6, "%s: integer (PTX %+v, estimate %+v)", c.name, got, est)
		assert.InDelta(t, got.Other, est.Other, 0.2*got.Other+6, "%s: other (PTX %+v, estimate %+v)", c.name, got, est)
	}
}

// decodersSource runs the quantized weights' word decoders of the prelude
// on one word each: an e2m1 code in the top 4 bits, an e4m3 code in the
// top 8, and byte t % 4 of a word of 4-bit differences plus 16.
const decodersSource = `
extern "C" __global__ void decoders(const unsigned* in, float* out) {
  const int t = threadIdx.x;
  out[3 * t] = lum_e2m1_top(in[3 * t]);
  out[3 * t + 1] = lum_e4m3_top(in[3 * t + 1]);
  out[3 * t + 2] = lum_q4_byte(in[3 * t + 2], (unsigned)t % 4u);
}
`

// TestQuantWordDecoders: under the emulation, the decoders the quantized
// matrix-vector kernel prints give quant's values of every e2m1 and e4m3
// code (but e4m3's NaN codes, which the kernel tests apart) whatever the
// bits below the code, and every 4-bit difference from its byte,
// whatever the other bytes.
func TestQuantWordDecoders(t *testing.T) {
	t.Parallel()
	needGXX(t)
	const n = 256
	rng := rand.New(rand.NewPCG(5, 6))
	in := make([]uint32, 3*n)
	for i := range n {
		in[3*i] = uint32(i%16)<<28 | rng.Uint32()>>4
		in[3*i+1] = uint32(i)<<24 | rng.Uint32()>>8
		w := uint32(0)
		for b := range 4 {
			w |= uint32(rng.IntN(32)) << (8 * b)
		}
		in[3*i+2] = w&^(0xff<<(8*(i%4))) | uint32(i%32)<<(8*(i%4))
	}
	data := make([]byte, 4*len(in))
	for i, w := range in {
		binary.LittleEndian.PutUint32(data[4*i:], w)
	}
	kernels := []emu.Kernel{{Name: "decoders", Params: []emu.Param{{Name: "in", Type: "const unsigned*"}, {Name: "out", Type: "float*"}}}}
	out, err := emu.Run(context.Background(), decodersSource, kernels, []emu.Buffer{{Bytes: len(data), Data: data}, {Bytes: len(data)}},
		[]emu.Launch{{Kernel: "decoders", Grid: [3]int{1, 1, 1}, Block: [3]int{n, 1, 1}, Args: []emu.Arg{{Buffer: 0}, {Buffer: 1}}}}, emu.Options{})
	require.NoError(t, err)
	got := func(i int) float64 { return float64(math.Float32frombits(binary.LittleEndian.Uint32(out[1][4*i:]))) }
	for i := range n {
		assert.Equal(t, quant.E2M1(uint8(i%16)), got(3*i), "e2m1 code %d", i%16)
		assert.Equal(t, math.Signbit(quant.E2M1(uint8(i%16))), math.Signbit(got(3*i)), "e2m1 code %d's sign", i%16)
		if i&0x7f != 0x7f {
			assert.Equal(t, quant.E4M3(uint8(i)), got(3*i+1), "e4m3 code %#x", i)
		}
		assert.Equal(t, float64(i%32-16), got(3*i+2), "byte %d of %#x", i%4, in[3*i+2])
	}
}
