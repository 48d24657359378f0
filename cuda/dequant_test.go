package cuda

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
)

// dequantMatmul is x [M, K] times a quantized weight of format f read as
// the matmul's right operand ([N, K] transposed for mxfp4 and fp8, [K, N]
// for awq and gptq), in activations of dtype dt.
func dequantMatmul(t *testing.T, f quant.Format, dt ir.DType, M, K, N int) *ir.Graph {
	return buildBody(t, func(b *ir.Builder) ir.Value {
		x := b.Input("$0", dt, ir.Dim(M), ir.Dim(K))
		var w ir.Value
		switch f {
		case quant.MXFP4:
			w = b.Permute(b.Dequant(f, dt, 32, 0, b.Input("$1", ir.U8, ir.Dim(N), ir.Dim(K/32), 16), b.Input("$2", ir.U8, ir.Dim(N), ir.Dim(K/32))), 1, 0)
		case quant.FP8:
			w = b.Permute(b.Dequant(f, dt, 32, 4, b.Input("$1", ir.U8, ir.Dim(N), ir.Dim(K)), b.Input("$2", ir.F32, ir.Dim((N+3)/4), ir.Dim((K+31)/32))), 1, 0)
		case quant.AWQ:
			w = b.Dequant(f, dt, 32, 0, b.Input("$1", ir.I32, ir.Dim(K), ir.Dim(N/8)), b.Input("$2", ir.F16, ir.Dim(K/32), ir.Dim(N)), b.Input("$3", ir.I32, ir.Dim(K/32), ir.Dim(N/8)))
		default:
			w = b.Dequant(f, dt, 32, 0, b.Input("$1", ir.I32, ir.Dim(K/8), ir.Dim(N)), b.Input("$2", ir.F16, ir.Dim(K/32), ir.Dim(N)), b.Input("$3", ir.I32, ir.Dim(K/32), ir.Dim(N/8)))
		}
		return b.MatMul(x, w)
	})
}

// TestDequantOperandLoads: a matmul reading a quantized weight through
// the per-element operand loads (cuda/dequant.go) matches the reference
// for every format, and an error planted in the decode
// (the nibble order of e2m1 pairs swapped, e8m0's bias off by one, AWQ's
// words read in sequential order, GPTQ's zero points taken as stored) is
// caught by the verification.
func TestDequantOperandLoads(t *testing.T) {
	needGXX(t)
	for _, c := range []struct {
		f        quant.Format
		old, bad string // a planted error: every old in the kernel becomes bad
	}{
		{quant.MXFP4, " & 1) * 4)", " & 1) * 4 ^ 4)"},
		{quant.MXFP4, "lum_e8m0_to_f32(", "2.0f * lum_e8m0_to_f32("},
		{quant.FP8, "lum_e4m3_to_f32(", "-lum_e4m3_to_f32("},
		{quant.AWQ, "lum_awq_nibble(", "lum_gptq_nibble("},
		{quant.GPTQ, " + 1u)", ")"},
	} {
		// f32: a bf16 weight of these shapes is read by the tensor-core
		// tiles (TestTensorCoreQuantTiles plants the same errors there).
		for _, dt := range []ir.DType{ir.F32} {
			t.Run(c.f.String()+"/"+dt.String()+"/"+strings.TrimSpace(c.old), func(t *testing.T) {
				body := dequantMatmul(t, c.f, dt, 3, 64, 48)
				k, err := PrintKernel("deq", "a quantized weight", body)
				require.NoError(t, err)
				require.Contains(t, k.Text, c.old)
				_, err = VerifyKernels(context.Background(), []*Kernel{k}, []*ir.Graph{body}, VerifyOptions{Seed: 3})
				require.NoError(t, err)
				bad := *k
				bad.Name = "deq_bad"
				bad.Text = strings.ReplaceAll(strings.Replace(k.Text, "void deq(", "void deq_bad(", 1), c.old, c.bad)
				_, err = VerifyKernels(context.Background(), []*Kernel{&bad}, []*ir.Graph{body}, VerifyOptions{Seed: 3})
				require.Error(t, err, "the planted error %q -> %q", c.old, c.bad)
			})
		}
	}
}

// TestRoundE4M3MatchesTheReference: lum_round_e4m3 under the emulation
// gives quant.SaturateE4M3's value, bit for bit, at every e4m3 value, at
// every midpoint between two (ties to the even code), just beside them,
// past the saturation and below the subnormals, signed, and NaN.
func TestRoundE4M3MatchesTheReference(t *testing.T) {
	needGXX(t)
	var xs []float64
	for c := range 0x7F {
		v, next := quant.E4M3(uint8(c)), quant.E4M3(uint8(c+1))
		mid := (v + next) / 2
		if c == 0x7E {
			mid, next = 464, 480
		}
		for _, x := range []float64{v, mid, math.Nextafter(mid, 0), math.Nextafter(mid, 1000), next * 1.01} {
			xs = append(xs, float64(float32(x)), -float64(float32(x)))
		}
	}
	xs = append(xs, 1e30, -1e30, 1e-30, math.NaN(), math.Inf(1), math.Inf(-1))
	body := buildBody(t, func(b *ir.Builder) ir.Value { return b.RoundE4M3(b.Input("$0", ir.F32, ir.Dim(len(xs)))) })
	k, err := PrintKernel("round_e4m3", "rounding to e4m3", body)
	require.NoError(t, err)
	in, err := ir.TensorOf(ir.F32, ir.Shape{ir.Dim(len(xs))}, xs...)
	require.NoError(t, err)
	outs, err := Emulate(context.Background(), []*Kernel{k}, [][]*ir.Tensor{{in}}, [][]ir.ValueType{{{Shape: ir.Shape{ir.Dim(len(xs))}, DType: ir.F32}}}, emu.Options{})
	require.NoError(t, err)
	for i, x := range xs {
		want, got := quant.SaturateE4M3(float64(float32(x))), outs[0][0].At(int64(i))
		if math.IsNaN(want) {
			require.True(t, math.IsNaN(got), "x=%g", x)
			continue
		}
		require.Equal(t, want, got, "x=%g", x)
	}
}

// TestDequantBatchAxes: a quantized weight with two leading axes (stacked
// experts of stacked layers, say) decodes at the right elements in the
// per-element loads: the batch's linear offset is one term of the index.
func TestDequantBatchAxes(t *testing.T) {
	needGXX(t)
	for _, c := range []struct {
		name  string
		build func(b *ir.Builder) ir.Value
	}{
		{"mxfp4", func(b *ir.Builder) ir.Value {
			return b.Dequant(quant.MXFP4, ir.F32, 32, 0, b.Input("$0", ir.U8, 2, 3, 8, 2, 16), b.Input("$1", ir.U8, 2, 3, 8, 2))
		}},
		{"gptq", func(b *ir.Builder) ir.Value {
			return b.Dequant(quant.GPTQ, ir.F32, 16, 0, b.Input("$0", ir.I32, 2, 3, 4, 16), b.Input("$1", ir.F16, 2, 3, 2, 16), b.Input("$2", ir.I32, 2, 3, 2, 2))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := buildBody(t, func(b *ir.Builder) ir.Value {
				w := c.build(b)
				return b.Add(w, b.Input("$9", ir.F32, b.Shape(w)...))
			})
			k, err := PrintKernel("deq_batch", "a stacked quantized weight", body)
			require.NoError(t, err)
			_, err = VerifyKernels(context.Background(), []*Kernel{k}, []*ir.Graph{body}, VerifyOptions{Seed: 5})
			require.NoError(t, err)
		})
	}
}

// TestCodeDecodersEveryCode: every device decoder of a quantized weight's
// codes (the per-element ones, and the in-register ones of the
// matrix-vector and experts kernels) gives package quant's value for
// every code under the emulation: e2m1's sixteen (both nibbles of a
// byte), e8m0's 0 (2^-127) and 0xFF (NaN), e4m3's subnormals, ±448 and
// both NaNs (but for lum_e4m3_top, which leaves NaN codes to its caller).
func TestCodeDecodersEveryCode(t *testing.T) {
	needGXX(t)
	body := buildBody(t, func(b *ir.Builder) ir.Value {
		return b.Cast(b.BroadcastTo(b.Input("$0", ir.U8, 1, 256), ir.Shape{7, 256}), ir.F32)
	})
	k, err := PrintKernel("codes", "every code", body)
	require.NoError(t, err)
	k.Text = `extern "C" __global__ void codes(const unsigned char* __restrict__ in0, float* __restrict__ out0) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < 256LL; i += (long long)gridDim.x * blockDim.x) {
    unsigned c = in0[i], w = c * 0x01010101u;
    out0[i] = lum_e2m1_to_f32(c & 15u);
    out0[256 + i] = lum_e8m0_to_f32(c);
    out0[512 + i] = lum_e4m3_to_f32(c);
    out0[768 + i] = lum_e2m1_in(w, (int)(i & 7));
    out0[1024 + i] = lum_e4m3_in(w, (int)(i & 3));
    out0[1280 + i] = lum_e2m1_top(c << 28);
    out0[1536 + i] = lum_e4m3_top(c << 24);
  }
}
`
	codes := make([]int64, 256)
	for i := range codes {
		codes[i] = int64(i)
	}
	in, err := ir.TensorOfInts(ir.U8, ir.Shape{1, 256}, codes...)
	require.NoError(t, err)
	outs, err := Emulate(context.Background(), []*Kernel{k}, [][]*ir.Tensor{{in}}, [][]ir.ValueType{{{Shape: ir.Shape{7, 256}, DType: ir.F32}}}, emu.Options{})
	require.NoError(t, err)
	got := func(row, c int) float64 { return outs[0][0].At(int64(row*256 + c)) }
	same := func(want, got float64, what string, c int) {
		if math.IsNaN(want) {
			require.True(t, math.IsNaN(got), "%s of %#02x: want NaN, got %g", what, c, got)
			return
		}
		require.Equal(t, want, got, "%s of %#02x", what, c)
		require.Equal(t, math.Signbit(want), math.Signbit(got), "%s of %#02x: the sign of %g", what, c, want)
	}
	for c := range 256 {
		nib := uint8(c) & 15
		if c%8%2 == 1 {
			nib = uint8(c) >> 4 // lum_e2m1_in's nibble c % 8 of a word of bytes c: odd nibbles are the high ones
		}
		same(quant.E2M1(uint8(c)&15), got(0, c), "lum_e2m1_to_f32", c)
		same(quant.E8M0(uint8(c)), got(1, c), "lum_e8m0_to_f32", c)
		same(quant.E4M3(uint8(c)), got(2, c), "lum_e4m3_to_f32", c)
		same(quant.E2M1(nib), got(3, c), "lum_e2m1_in", c)
		same(quant.E4M3(uint8(c)), got(4, c), "lum_e4m3_in", c)
		same(quant.E2M1(uint8(c)&15), got(5, c), "lum_e2m1_top", c)
		if !math.IsNaN(quant.E4M3(uint8(c))) {
			same(quant.E4M3(uint8(c)), got(6, c), "lum_e4m3_top", c)
		}
	}
}

// TestQuantGEMVNaNCodes: NaN codes and scales reach the matrix-vector
// kernels' outputs where the reference has them: an e8m0 scale of 0xFF
// (NaN) makes its column NaN, an e4m3 NaN code (0x7F, 0xFF) its column,
// and an e8m0 scale of 0 (2^-127) leaves its column finite, as the
// reference computes each; every other column matches the reference.
func TestQuantGEMVNaNCodes(t *testing.T) {
	needGXX(t)
	dev, err := cost.LookupDevice("h100-sxm")
	require.NoError(t, err)
	model := cost.NewModel(dev, cost.Defaults(dev))
	for _, f := range []quant.Format{quant.MXFP4, quant.FP8} {
		t.Run(f.String(), func(t *testing.T) {
			const M, K, N = 1, 64, 48
			body := dequantMatmul(t, f, ir.BF16, M, K, N)
			est, err := model.Kernel(body)
			require.NoError(t, err)
			require.True(t, est.Schedule.GEMV, "the matrix-vector kernel: %s", est.Schedule)
			k, err := PrintKernelWith("nan_codes", "NaN codes", body, est.Schedule)
			require.NoError(t, err)
			feeds, err := ir.RandomFeeds(body, 9, ir.Typical)
			require.NoError(t, err)
			args := make([]*ir.Tensor, 0, 3)
			for _, v := range body.Inputs() {
				args = append(args, feeds[body.Node(v).Name])
			}
			codes, scales := args[1], args[2]
			if f == quant.MXFP4 {
				scales.SetInt(3*(K/32)+1, 0xFF) // column 3's second block: NaN
				scales.SetInt(7*(K/32), 0)      // column 7's first block: 2^-127
			} else {
				codes.SetInt(5*K+9, 0x7F) // column 5: NaN
				codes.SetInt(40*K, 0xFF)  // column 40: -NaN
			}
			want, err := ir.EvalKernel(context.Background(), body, args...)
			require.NoError(t, err)
			outs, err := Emulate(context.Background(), []*Kernel{k}, [][]*ir.Tensor{args}, [][]ir.ValueType{{{Shape: want[0].Shape, DType: want[0].DType}}}, emu.Options{})
			require.NoError(t, err)
			nans := 0
			for i := range want[0].Len() {
				w, g := want[0].At(i), outs[0][0].At(i)
				if math.IsNaN(w) {
					nans++
					require.True(t, math.IsNaN(g), "column %d: want NaN, got %g", i, g)
					continue
				}
				require.InDelta(t, w, g, 0.02*math.Max(1, math.Abs(w)), "column %d", i)
			}
			require.Equal(t, map[quant.Format]int{quant.MXFP4: 1, quant.FP8: 2}[f], nans)
		})
	}
}
