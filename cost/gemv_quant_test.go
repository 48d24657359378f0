package cost

import (
	"fmt"
	"testing"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// quantProjection is a decode projection x [M, K] (bf16) times a weight
// of N columns quantized in format f: mxfp4 blocks; fp8 with groupN ×
// group scale blocks; awq and gptq with f16 scales in groups of group.
func quantProjection(t testing.TB, f quant.Format, M, K, N, group, groupN ir.Dim) *ir.Graph {
	return body(t, func(b *ir.Builder) ir.Value {
		x := b.Input("$0", ir.BF16, M, K)
		switch f {
		case quant.MXFP4:
			w := b.Dequant(f, ir.BF16, 32, 0, b.Input("$1", ir.U8, N, K/32, 16), b.Input("$2", ir.U8, N, K/32))
			return b.MatMul(x, b.Permute(w, 1, 0))
		case quant.FP8:
			sn, sk := (N+groupN-1)/groupN, (K+group-1)/group
			w := b.Dequant(f, ir.BF16, int64(group), int64(groupN), b.Input("$1", ir.U8, N, K), b.Input("$2", ir.F32, sn, sk))
			return b.MatMul(x, b.Permute(w, 1, 0))
		case quant.AWQ:
			return b.MatMul(x, b.Dequant(f, ir.BF16, int64(group), 0, b.Input("$1", ir.I32, K, N/8), b.Input("$2", ir.F16, K/group, N), b.Input("$3", ir.I32, K/group, N/8)))
		}
		return b.MatMul(x, b.Dequant(f, ir.BF16, int64(group), 0, b.Input("$1", ir.I32, K/8, N), b.Input("$2", ir.F16, K/group, N), b.Input("$3", ir.I32, K/group, N/8)))
	})
}

// packedBytes is what a body's inputs other than $0 (A) hold: a quantized
// weight's codes, scales and zero points.
func packedBytes(g *ir.Graph) float64 {
	var b float64
	for _, v := range g.Inputs() {
		if n := g.Node(v); n.Name != "$0" {
			b += float64(n.Shape.NumElements()) * float64(n.DType.Size())
		}
	}
	return b
}

// TestQuantGEMVDecodeProjection: a llama-3-8b MLP up projection at one
// decode row (K = 4096, N = 14336) with its weight in each format is
// priced as the matrix-vector kernel streaming the packed bytes: its DRAM
// traffic is the codes, scales and zero points plus A and C, never a
// dequantized copy; it is no faster than those bytes at the device's peak
// bandwidth and faster than the bf16 weight's kernel, within twice the
// packed bytes at the achievable bandwidth (the decode's issue and the
// scales' loads on top). The figures are logged.
func TestQuantGEMVDecodeProjection(t *testing.T) {
	d, err := LookupDevice("h100-sxm")
	require.NoError(t, err)
	m := NewModel(d, Defaults(d))
	const M, K, N = 1, 4096, 14336
	bf16, err := m.Kernel(linearBody(t, ir.BF16, M, K, N))
	require.NoError(t, err)
	weight := float64(K * N * 2)
	b, err := Explain(d, m.Factors, bf16.Features)
	require.NoError(t, err)
	t.Logf("%-22s %7.1f µs  %-44s bound %-6s (dram %.1f, issue %.1f µs) weight %6.1f MB, at peak DRAM %5.1f µs", "bf16", bf16.Seconds*1e6, bf16.Schedule, bf16.Bound, b.DRAM*1e6, b.Issue*1e6, weight/1e6, weight/d.MemoryBandwidth*1e6)
	for _, c := range []struct {
		name          string
		f             quant.Format
		group, groupN ir.Dim
	}{
		{"mxfp4", quant.MXFP4, 32, 0},
		{"fp8 per channel", quant.FP8, K, 1},
		{"fp8 128x128 blocks", quant.FP8, 128, 128},
		{"awq group 128", quant.AWQ, 128, 0},
		{"gptq group 128", quant.GPTQ, 128, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := quantProjection(t, c.f, M, K, N, c.group, c.groupN)
			e, err := m.Kernel(body)
			require.NoError(t, err)
			packed := packedBytes(body)
			peak := packed / d.MemoryBandwidth
			achievable := packed / (d.MemoryBandwidth * d.MemoryAchievable)
			b, err := Explain(d, m.Factors, e.Features)
			require.NoError(t, err)
			t.Logf("%-22s %7.1f µs  %-44s bound %-6s (dram %.1f, issue %.1f µs) packed %6.1f MB, at peak DRAM %5.1f µs", c.name, e.Seconds*1e6, e.Schedule, e.Bound, b.DRAM*1e6, b.Issue*1e6, packed/1e6, peak*1e6)
			assert.True(t, e.Schedule.GEMV, "the matrix-vector kernel streams a decode projection's weight")
			assert.InDelta(t, packed+float64(M*K*2+M*N*2), e.Features.Bytes, 1, "DRAM: the packed weight, A and C")
			assert.GreaterOrEqual(t, e.Seconds, peak)
			assert.Less(t, e.Seconds, bf16.Seconds, "no faster than the bf16 weight's kernel")
			assert.Less(t, e.Seconds, 2*achievable+m.Factors.Launch, "more than twice its packed bytes' time")
		})
	}
}

// TestDequantOpFLOPs: a dequant's arithmetic is a few operations an
// element (dequantOps), whatever the format, as a kernel that decodes its
// loads' words does it.
func TestDequantOpFLOPs(t *testing.T) {
	for _, f := range []quant.Format{quant.MXFP4, quant.FP8, quant.AWQ, quant.GPTQ} {
		g := quantProjection(t, f, 1, 256, 64, 32, 1)
		for _, n := range g.Nodes {
			if n.Op == ir.OpDequant {
				assert.Equal(t, float64(dequantOps*256*64), opFLOPs(g, n), f.String())
			}
		}
	}
}

// TestQuantGEMVSchedulesModest: a quantized decode projection lists a
// few matrix-vector schedules of its layout, each keeping 2 to 8 code
// loads in flight a lane and at most 8 accumulators (K-contiguous) or one
// load's columns a row (row-major) in registers, and none for a weight
// the layouts do not take (awq past four rows, fp8 scale blocks that
// split a load).
func TestQuantGEMVSchedulesModest(t *testing.T) {
	for _, c := range []struct {
		name          string
		f             quant.Format
		M             ir.Dim
		group, groupN ir.Dim
		want          bool
	}{
		{"mxfp4", quant.MXFP4, 1, 32, 0, true},
		{"mxfp4 eight rows", quant.MXFP4, 8, 32, 0, true},
		{"fp8", quant.FP8, 4, 128, 128, true},
		{"fp8 blocks of 8", quant.FP8, 1, 8, 1, false},
		{"awq", quant.AWQ, 1, 128, 0, true},
		{"awq four rows", quant.AWQ, 4, 128, 0, true},
		{"awq five rows", quant.AWQ, 5, 128, 0, false},
		{"gptq", quant.GPTQ, 8, 128, 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := quantProjection(t, c.f, c.M, 4096, 14336, c.group, c.groupN)
			k, err := analyze(body)
			require.NoError(t, err)
			list := k.gemvSchedules()
			if !c.want {
				assert.Empty(t, list)
				return
			}
			require.NotEmpty(t, list)
			assert.LessOrEqual(t, len(list), 24, "a modest list")
			q, ok := GEMVQuantWeight(body, k.matmuls[0])
			require.True(t, ok)
			for _, s := range list {
				loads, _, _, ok := GEMVLoop(body, k.matmuls[0], s)
				require.True(t, ok, "%s", s)
				assert.True(t, loads >= 2 && loads <= 8, "%s: %d loads in flight", s, loads)
				if q.KContiguous() {
					cols, _, _ := GEMVLayout(s)
					assert.LessOrEqual(t, cols*int(c.M), 8, "%s", s)
				}
			}
		})
	}
}

// TestQuantGEMVNarrowBlocks: a row-major quantized projection with few
// columns or a long K takes blocks narrow enough to fill the GPU (an awq
// k/v projection's 1024 columns in 32 blocks of 32 rather than 16 of 64,
// its down projection in 128; gptq's in blocks of 8 or 16 columns), and
// L2 is charged whole 32-byte sectors: an awq block of 32 columns reads
// 16 bytes of codes a k, so its codes cost twice their bytes from L2,
// where DRAM still moves them once.
func TestQuantGEMVNarrowBlocks(t *testing.T) {
	d, err := LookupDevice("h100-sxm")
	require.NoError(t, err)
	m := NewModel(d, Defaults(d))
	for _, c := range []struct {
		name      string
		f         quant.Format
		K, N      ir.Dim
		minBlocks int
	}{
		{"awq k/v", quant.AWQ, 4096, 1024, 32},
		{"awq down", quant.AWQ, 14336, 4096, 128},
		{"gptq k/v", quant.GPTQ, 4096, 1024, 64},
		{"gptq down", quant.GPTQ, 14336, 4096, 128},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := quantProjection(t, c.f, 1, c.K, c.N, 128, 0)
			e, err := m.Kernel(body)
			require.NoError(t, err)
			t.Logf("%s: %.1f µs %s bound %s, %d blocks", c.name, e.Seconds*1e6, e.Schedule, e.Bound, e.Features.Blocks)
			assert.True(t, e.Schedule.GEMV)
			assert.GreaterOrEqual(t, e.Features.Blocks, c.minBlocks)
			assert.InDelta(t, packedBytes(body)+float64(c.K*2+c.N*2), e.Features.Bytes, 1, "DRAM moves the packed weight once")
		})
	}
	body := quantProjection(t, quant.AWQ, 1, 4096, 1024, 128, 0)
	k, err := analyze(body)
	require.NoError(t, err)
	codes := float64(4096 * 1024 / 2)
	for _, bn := range []int{32, 64} {
		p, ok := k.gemvQuantPlan(mustQuant(t, body, k), Schedule{BM: 1, BN: bn, Threads: 256, Stages: 4, GEMV: true})
		require.True(t, ok, "bn=%d", bn)
		share := 1.0
		if bn == 32 {
			share = 2
		}
		assert.GreaterOrEqual(t, p.weight, share*codes, "bn=%d: the codes from L2 in whole sectors", bn)
		assert.Less(t, p.weight, share*codes+codes/2, "bn=%d", bn)
	}
}

// mustQuant is body's quantized weight.
func mustQuant(t *testing.T, body *ir.Graph, k *kernelForm) GEMVQuant {
	q, ok := GEMVQuantWeight(body, k.matmuls[0])
	require.True(t, ok)
	return q
}

// TestQuantGEMVFusedDecode: awq and gptq values with f16 or bf16 scales
// decode in one multiply-add (FusedDecode), a value's FP work in the main
// loop its decode and an FMA a row; f32 scales keep the subtraction and
// the product.
func TestQuantGEMVFusedDecode(t *testing.T) {
	for _, f := range []quant.Format{quant.AWQ, quant.GPTQ} {
		for _, sdt := range []ir.DType{ir.F16, ir.BF16, ir.F32} {
			body := body(t, func(b *ir.Builder) ir.Value {
				x := b.Input("$0", ir.F32, 2, 4096)
				cs := ir.Shape{4096, 256 / 8}
				if f == quant.GPTQ {
					cs = ir.Shape{4096 / 8, 256}
				}
				codes := b.Input("$1", ir.I32, cs...)
				return b.MatMul(x, b.Dequant(f, ir.F32, 128, 0, codes, b.Input("$2", sdt, 32, 256), b.Input("$3", ir.I32, 32, 256/8)))
			})
			k, err := analyze(body)
			require.NoError(t, err)
			q := mustQuant(t, body, k)
			assert.Equal(t, sdt != ir.F32, q.FusedDecode(), "%s %s", f, sdt)
			s := Schedule{BM: 2, BN: 64, Threads: 128, Stages: 2, GEMV: true}
			loads, _, mix, ok := GEMVLoop(body, k.matmuls[0], s)
			require.True(t, ok)
			values := float64(loads * q.LoadBytes() * 2)
			decode := 1.0
			if !q.FusedDecode() {
				decode = 2
			}
			const rows = 2
			extra := 0.0
			if f == quant.GPTQ {
				extra = float64(loads) * 4 * rows // a word's sum added to a row's accumulator
			}
			assert.InDelta(t, values*(decode+rows)+extra, mix.FP, 1e-9, "%s %s", f, sdt)
		}
	}
}

// TestQuantGEMVMergedParts: a merged projection's right operand, a
// concat along the columns of quantized weights of one format, dtype, K
// and groups, is streamed part by part (each its own arguments): the
// model prices every part's packed bytes once; parts of two formats, or an
// awq part no whole load of columns wide, are no matrix-vector weight.
func TestQuantGEMVMergedParts(t *testing.T) {
	d, err := LookupDevice("h100-sxm")
	require.NoError(t, err)
	m := NewModel(d, Defaults(d))
	awq := func(b *ir.Builder, i int, K, N ir.Dim) ir.Value {
		in := func(j int, dt ir.DType, s ...ir.Dim) ir.Value { return b.Input(fmt.Sprintf("$%d", 1+3*i+j), dt, s...) }
		return b.Dequant(quant.AWQ, ir.BF16, 128, 0, in(0, ir.I32, K, N/8), in(1, ir.F16, K/128, N), in(2, ir.I32, K/128, N/8))
	}
	merged := body(t, func(b *ir.Builder) ir.Value {
		x := b.Input("$0", ir.BF16, 1, 4096)
		return b.MatMul(x, b.Concat(1, awq(b, 0, 4096, 4096), awq(b, 1, 4096, 1024)))
	})
	k, err := analyze(merged)
	require.NoError(t, err)
	q := mustQuant(t, merged, k)
	require.Len(t, q.Parts, 2)
	assert.Equal(t, int64(5120), q.N)
	assert.Len(t, q.Args(), 6)
	e, err := m.Kernel(merged)
	require.NoError(t, err)
	assert.True(t, e.Schedule.GEMV)
	assert.InDelta(t, packedBytes(merged)+4096*2+5120*2, e.Features.Bytes, 1, "DRAM: both weights' packed bytes, A and C")
	t.Logf("q and k merged: %.1f µs %s", e.Seconds*1e6, e.Schedule)

	mixed := body(t, func(b *ir.Builder) ir.Value {
		x := b.Input("$0", ir.BF16, 1, 4096)
		gptq := b.Dequant(quant.GPTQ, ir.BF16, 128, 0, b.Input("$4", ir.I32, 512, 1024), b.Input("$5", ir.F16, 32, 1024), b.Input("$6", ir.I32, 32, 128))
		return b.MatMul(x, b.Concat(1, awq(b, 0, 4096, 4096), gptq))
	})
	narrow := body(t, func(b *ir.Builder) ir.Value {
		x := b.Input("$0", ir.BF16, 1, 4096)
		return b.MatMul(x, b.Concat(1, awq(b, 0, 4096, 4096), awq(b, 1, 4096, 16)))
	})
	for name, g := range map[string]*ir.Graph{"two formats": mixed, "a part of 16 awq columns": narrow} {
		k, err := analyze(g)
		require.NoError(t, err)
		_, ok := GEMVQuantWeight(g, k.matmuls[0])
		assert.False(t, ok, name)
	}
}

// TestQuantGEMVGatheredGateUp: a merged gate and up projection over
// quantized weights whose epilogue gathers the SiLU product (lowering's
// sibling merge) is a matrix-vector kernel: its blocks hold both parts'
// columns of a position, a thread's columns (an awq lane's 32) in one of
// them.
func TestQuantGEMVGatheredGateUp(t *testing.T) {
	d, err := LookupDevice("h100-sxm")
	require.NoError(t, err)
	m := NewModel(d, Defaults(d))
	const K, N = 4096, 14336
	g := body(t, func(b *ir.Builder) ir.Value {
		x := b.Input("$0", ir.BF16, 1, K)
		in := func(i int, dt ir.DType, s ...ir.Dim) ir.Value { return b.Input(fmt.Sprintf("$%d", i), dt, s...) }
		w := func(i int) ir.Value {
			return b.Dequant(quant.AWQ, ir.BF16, 128, 0, in(i, ir.I32, K, N/8), in(i+1, ir.F16, K/128, N), in(i+2, ir.I32, K/128, N/8))
		}
		mm := b.MatMul(x, b.Concat(1, w(1), w(4)))
		gate := b.Slice(mm, 1, 0, N, 1)
		return b.Mul(b.Mul(gate, b.Sigmoid(gate)), b.Slice(mm, 1, N, 2*N, 1))
	})
	_, err = FormOf(g)
	require.NoError(t, err)
	e, err := m.Kernel(g)
	require.NoError(t, err)
	t.Logf("awq gate and up, SiLU gathered: %.1f µs %s bound %s", e.Seconds*1e6, e.Schedule, e.Bound)
	require.True(t, e.Schedule.GEMV)
	assert.Zero(t, e.Schedule.BN/2%32, "an awq lane's 32 columns in one part")
	assert.InDelta(t, packedBytes(g)+K*2+N*2, e.Features.Bytes, 1, "DRAM: the packed weights, A and the product")
}
