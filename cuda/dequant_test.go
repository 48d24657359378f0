package cuda

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

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
// for every format in f32 and bf16, and an error planted in the decode
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
		for _, dt := range []ir.DType{ir.BF16, ir.F32} {
			if dt == ir.F32 && testing.Short() {
				continue // f32 in the long command: each case is two compilations
			}
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
