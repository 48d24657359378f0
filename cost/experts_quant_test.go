package cost

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
)

// quantExpertsBody is an experts_up or experts_down body whose experts'
// weight is quantized in format f (none: plain) as a checkpoint packs it,
// [E, N, K] read through permute(dequant(...), [0, 2, 1]), over R rows of
// gpt-oss's shapes with E experts (hidden and intermediate 2880, top 4).
func quantExpertsBody(t *testing.T, f quant.Format, up bool, R, E int) *ir.Graph {
	const H, I, k = 2880, 2880, 4
	b := ir.NewBuilder("experts")
	dt := ir.BF16
	var x ir.Value
	if up {
		x = b.Input("$0", dt, ir.Dim(R), H)
	} else {
		x = b.Input("$0", dt, ir.Dim(R), k, I)
	}
	w := b.Input("$1", ir.F32, ir.Dim(R), ir.Dim(E))
	N, K := ir.Dim(2*I), ir.Dim(H)
	if !up {
		N, K = H, I
	}
	var wt ir.Value
	switch f {
	case quant.None:
		wt = b.Input("$2", dt, ir.Dim(E), K, N)
	case quant.MXFP4:
		wt = b.Permute(b.Dequant(f, dt, 32, 0, b.Input("$2", ir.U8, ir.Dim(E), N, K/32, 16), b.Input("$3", ir.U8, ir.Dim(E), N, K/32)), 0, 2, 1)
	case quant.FP8:
		wt = b.Permute(b.Dequant(f, dt, 128, 128, b.Input("$2", ir.U8, ir.Dim(E), N, K), b.Input("$3", ir.F32, ir.Dim(E), (N+127)/128, (K+127)/128)), 0, 2, 1)
	}
	if up {
		b.Output("out", b.ExpertsUp(x, w, wt, b.Input("$4", dt, ir.Dim(E), N), k, ir.GatingClampedSwiGLU, 7))
	} else {
		b.Output("out", b.ExpertsDown(x, w, wt, b.Input("$4", dt, ir.Dim(E), N), k))
	}
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

// TestExpertsQuantDecodeNearPackedBytes: gpt-oss-120b's and -20b's decode
// experts (one token, four experts) over MXFP4 weights are priced near the
// DRAM time of the chosen experts' packed codes and scales, and their
// bytes are those, about a quarter of bf16's. It logs the figures.
func TestExpertsQuantDecodeNearPackedBytes(t *testing.T) {
	dev, err := LookupDevice("h100-sxm")
	require.NoError(t, err)
	m := NewModel(dev, Defaults(dev))
	for _, E := range []int{128, 32} {
		for _, up := range []bool{true, false} {
			var times [2]float64
			for i, f := range []quant.Format{quant.MXFP4, quant.None} {
				body := quantExpertsBody(t, f, up, 1, E)
				p, err := Experts(body)
				require.NoError(t, err)
				e, err := m.Kernel(body)
				require.NoError(t, err)
				weights := 4 * p.ExpertBytes()
				dram := weights / dev.MemoryBandwidth
				times[i] = e.Seconds
				t.Logf("E=%d up=%v %s: %.2f µs (%s, %s), %.2f MB read (weights %.2f MB: %.2f µs at peak, %.2f µs achievable)",
					E, up, f, e.Seconds*1e6, e.Bound, e.Schedule, e.Features.Bytes/1e6, weights/1e6, dram*1e6, dram/dev.MemoryAchievable*1e6)
				assert.InDelta(t, weights, e.Features.Bytes, 0.02*weights, "the four experts' weights and little else")
				assert.Less(t, e.Seconds, 1.4*dram/dev.MemoryAchievable+dev.Launch, "near the packed bytes' DRAM time")
				if f == quant.MXFP4 {
					assert.InDelta(t, 4*float64(p.Read*p.Kd)*(0.5+1.0/32), weights, 1)
				}
			}
			assert.Less(t, times[0], 0.5*times[1], "MXFP4 reads a quarter of bf16's bytes")
		}
	}
}

// TestExpertsQuantRefused: the experts form reads an mxfp4 or fp8 weight
// through the permute checkpoints need; another format, another view, or a
// quantized bias is refused by name.
func TestExpertsQuantRefused(t *testing.T) {
	build := func(f func(b *ir.Builder) ir.Value) *ir.Graph {
		b := ir.NewBuilder("experts")
		b.Output("out", f(b))
		g, err := b.Build()
		require.NoError(t, err)
		return g
	}
	x := func(b *ir.Builder) (ir.Value, ir.Value) {
		return b.Input("$0", ir.BF16, 2, 64), b.Input("$1", ir.F32, 2, 4)
	}
	mx := func(b *ir.Builder, N, K int) ir.Value {
		return b.Dequant(quant.MXFP4, ir.BF16, 32, 0, b.Input("$2", ir.U8, 4, ir.Dim(N), ir.Dim(K/32), 16), b.Input("$3", ir.U8, 4, ir.Dim(N), ir.Dim(K/32)))
	}
	for _, c := range []struct {
		name, err string
		body      *ir.Graph
	}{
		{"awq", "awq", build(func(b *ir.Builder) ir.Value {
			x, w := x(b)
			wt := b.Dequant(quant.AWQ, ir.BF16, 16, 0, b.Input("$2", ir.I32, 4, 64, 6), b.Input("$3", ir.F16, 4, 4, 48), b.Input("$4", ir.I32, 4, 4, 6))
			return b.ExpertsUp(x, w, wt, b.Input("$5", ir.BF16, 4, 48), 2, ir.GatingSwiGLU, 0)
		})},
		{"no permute", "reshape", build(func(b *ir.Builder) ir.Value {
			x, w := x(b)
			wt := b.Reshape(mx(b, 48, 64), 4, 64, 48)
			return b.ExpertsUp(x, w, wt, b.Input("$4", ir.BF16, 4, 48), 2, ir.GatingSwiGLU, 0)
		})},
		{"quantized bias", "operand 3 is quantized", build(func(b *ir.Builder) ir.Value {
			x, w := x(b)
			bias := b.Reshape(b.Dequant(quant.MXFP4, ir.BF16, 32, 0, b.Input("$4", ir.U8, 4, 1, 16), b.Input("$5", ir.U8, 4, 1)), 4, 32)
			return b.ExpertsUp(x, w, b.Permute(mx(b, 32, 64), 0, 2, 1), bias, 2, ir.GatingSwiGLU, 0)
		})},
	} {
		_, err := FormOf(c.body)
		require.Error(t, err, c.name)
		assert.Contains(t, err.Error(), c.err, c.name)
	}
	ok := build(func(b *ir.Builder) ir.Value {
		x, w := x(b)
		return b.ExpertsUp(x, w, b.Permute(mx(b, 48, 64), 0, 2, 1), b.Input("$4", ir.BF16, 4, 48), 2, ir.GatingSwiGLU, 0)
	})
	f, err := FormOf(ok)
	require.NoError(t, err)
	assert.Equal(t, FormExperts, f)
}
