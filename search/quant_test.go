package search

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
	"github.com/lumsearch/lumsearch/tunedb"
)

// quantLinear is y = silu(x @ W1) @ W2 with both weights quantized in
// format f (quantWeight), in activations of dtype dt.
func quantLinear(t *testing.T, f quant.Format, dt ir.DType, M, H, I int) *ir.Graph {
	b := ir.NewBuilder("qlinear")
	x := b.Input("x", dt, ir.Dim(M), ir.Dim(H))
	weight := quantWeight(b, f, dt)
	h := b.MatMul(x, weight("up", I, H))
	h = b.Mul(h, b.Sigmoid(h))
	b.Output("y", b.MatMul(h, weight("down", H, I)))
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

// quantWeight builds a projection's weight of N columns over K quantized
// in format f, as a matmul's right operand [K, N] of dtype dt: [N, K] read
// transposed for mxfp4 and fp8, [K, N] for awq and gptq, as their
// checkpoints store them (groups of 16; fp8 a scale a row's 16).
func quantWeight(b *ir.Builder, f quant.Format, dt ir.DType) func(name string, N, K int) ir.Value {
	return func(name string, N, K int) ir.Value {
		switch f {
		case quant.MXFP4:
			return b.Transpose(b.Dequant(f, dt, 32, 0, b.Weight(name+".blocks", ir.U8, ir.Dim(N), ir.Dim(K/32), 16),
				b.Weight(name+".scales", ir.U8, ir.Dim(N), ir.Dim(K/32))), 0, 1)
		case quant.FP8:
			return b.Transpose(b.Dequant(f, dt, 16, 1, b.Weight(name+".weight", ir.U8, ir.Dim(N), ir.Dim(K)),
				b.Weight(name+".weight_scale", ir.F32, ir.Dim(N), ir.Dim((K+15)/16))), 0, 1)
		case quant.AWQ:
			return b.Dequant(f, dt, 16, 0, b.Weight(name+".qweight", ir.I32, ir.Dim(K), ir.Dim(N/8)),
				b.Weight(name+".scales", ir.F16, ir.Dim(K/16), ir.Dim(N)), b.Weight(name+".qzeros", ir.I32, ir.Dim(K/16), ir.Dim(N/8)))
		}
		return b.Dequant(f, dt, 16, 0, b.Weight(name+".qweight", ir.I32, ir.Dim(K/8), ir.Dim(N)),
			b.Weight(name+".scales", ir.F16, ir.Dim(K/16), ir.Dim(N)), b.Weight(name+".qzeros", ir.I32, ir.Dim(K/16), ir.Dim(N/8)))
	}
}

// TestQuantizedLinearCompiles: quantized weights compile through the whole
// pipeline, each dequant inlined into the kernels that read its weight
// (no kernel writes a dequantized copy, none runs at load time; a decode
// row's through the matrix-vector kernel, which streams the packed
// bytes), every kernel verified and the whole program emulated against
// the reference, for a decode row and a chunk of rows.
func TestQuantizedLinearCompiles(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("the CPU emulation needs g++")
	}
	for _, f := range []quant.Format{quant.MXFP4, quant.FP8, quant.AWQ, quant.GPTQ} {
		for _, c := range []struct {
			dt ir.DType
			M  int
		}{{ir.BF16, 1}, {ir.F32, 12}} {
			t.Run(f.String()+"/"+c.dt.String(), func(t *testing.T) {
				dir := t.TempDir()
				t.Setenv(tunedb.EnvPath, filepath.Join(dir, "tunedb.jsonl"))
				g := quantLinear(t, f, c.dt, c.M, 64, 96)
				weights, err := ir.RandomLeaves(g, 5, ir.Typical, ir.OpWeight)
				require.NoError(t, err)
				md := &Model{Name: "qlinear", Graph: g, Weights: weights}
				var log bytes.Buffer
				res, err := Compile(t.Context(), md, Options{Events: NewPrinter(&log, false).Event})
				require.NoError(t, err, log.String())
				assert.Contains(t, res.Verified, "the whole program matches the reference interpreter")
				lp := res.final.compiled.lowered
				assert.Empty(t, lp.Prep, "nothing is prepared at load time")
				for _, l := range lp.Run {
					t.Logf("%s:\n%s", l.Name, l.Body)
					assert.Contains(t, l.Body.String(), "dequant", "launch %s reads a quantized weight", l.Name)
				}
				var src strings.Builder
				for _, k := range res.final.compiled.kernels {
					src.WriteString(k.Text)
					if c.M <= cost.GEMVRows {
						assert.True(t, k.Schedule.GEMV, "%s: a decode row's projection streams its packed weight (%s)", k.Name, k.Schedule)
					}
				}
				t.Logf("%s", log.String())
			})
		}
	}
}

// TestTinyQuantizedModelsCompile: the tiny Llama's decode step with its
// linear weights in each format (corpus.Options.Weights, packed from its
// random weights) compiles, its kernels verified and its reduced
// configuration emulated against the reference at several positions, in
// f32 and bf16 activations. Long command only: eight whole compilations.
func TestTinyQuantizedModelsCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("eight compilations of a whole decode step: the long test command")
	}
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("the CPU emulation needs g++")
	}
	for _, f := range []quant.Format{quant.MXFP4, quant.FP8, quant.AWQ, quant.GPTQ} {
		for _, dt := range []ir.DType{ir.F32, ir.BF16} {
			t.Run(f.String()+"/"+dt.String(), func(t *testing.T) {
				t.Setenv(tunedb.EnvPath, filepath.Join(t.TempDir(), "tunedb.jsonl"))
				md, err := LoadModel("tiny-llama:decode", ModelOptions{Build: corpus.Options{Seq: 8, Past: -1, DType: dt, Weights: f}})
				require.NoError(t, err)
				var log bytes.Buffer
				res, err := Compile(t.Context(), md, Options{Events: NewPrinter(&log, false).Event})
				require.NoError(t, err, log.String())
				assert.Contains(t, res.Verified, "matches the reference interpreter", log.String())
				for _, l := range res.final.compiled.lowered.Prep {
					assert.NotContains(t, l.Body.String(), "dequant", "launch %s decodes a weight at load time", l.Name)
				}
			})
		}
	}
}

// TestQuantizedFloorCountsPackedBytes: the floor of a quantized MLP at a
// decode row counts its weights' packed bytes (codes, scales, zero points
// as the checkpoint stores them, by hand), never a dequantized copy's.
func TestQuantizedFloorCountsPackedBytes(t *testing.T) {
	dev, err := cost.LookupDevice("h100-sxm")
	require.NoError(t, err)
	const H, I = 256, 512
	packed := func(f quant.Format, N, K float64) float64 {
		switch f {
		case quant.MXFP4:
			return N*K/2 + N*K/32 // e2m1 codes, an e8m0 byte a block of 32
		case quant.FP8:
			return N*K + N*K/16*4 // e4m3 codes, an f32 scale a row's 16
		}
		return K*N/2 + K/16*N*2 + K/16*N/8*4 // 4-bit codes, f16 scales and packed zeros a group of 16
	}
	for _, f := range []quant.Format{quant.MXFP4, quant.FP8, quant.AWQ, quant.GPTQ} {
		g := quantLinear(t, f, ir.BF16, 1, H, I)
		fl := programFloor(g, dev, nil)
		want := 2*H*2 + packed(f, I, H) + packed(f, H, I) // x and y in bf16, the two weights
		assert.InDelta(t, want, fl.Bytes, 0.5, f.String())
		assert.InDelta(t, want/dev.MemoryBandwidth, fl.Hardware, 1e-15, "%s: bound by its packed bytes", f)
	}
}

// TestQuantizedWeightCastCompiles: a quantized weight read through a cast
// as well as a transpose (a bf16 dequantization widened to f32 for an f32
// matmul) compiles, the cast inlined with the dequant into the kernel
// that reads the weight.
func TestQuantizedWeightCastCompiles(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("the CPU emulation needs g++")
	}
	t.Setenv(tunedb.EnvPath, filepath.Join(t.TempDir(), "tunedb.jsonl"))
	b := ir.NewBuilder("cast")
	x := b.Input("x", ir.F32, 2, 64)
	w := b.Dequant(quant.FP8, ir.BF16, 32, 1, b.Weight("w", ir.U8, 48, 64), b.Weight("w_scale", ir.F32, 48, 2))
	b.Output("y", b.MatMul(x, b.Cast(b.Transpose(w, 0, 1), ir.F32)))
	g, err := b.Build()
	require.NoError(t, err)
	weights, err := ir.RandomLeaves(g, 5, ir.Typical, ir.OpWeight)
	require.NoError(t, err)
	var log bytes.Buffer
	res, err := Compile(t.Context(), &Model{Name: "cast", Graph: g, Weights: weights}, Options{Events: NewPrinter(&log, false).Event})
	require.NoError(t, err, log.String())
	assert.Contains(t, res.Verified, "the whole program matches the reference interpreter")
	for _, l := range res.final.compiled.lowered.Run {
		assert.Contains(t, l.Body.String(), "dequant", "launch %s reads the quantized weight", l.Name)
	}
	assert.Empty(t, res.final.compiled.lowered.Prep)
}

// TestAWQExpertsRefused: a mixture whose experts are awq (no experts
// kernel decodes them) is refused before the search, naming the weight.
func TestAWQExpertsRefused(t *testing.T) {
	md, err := LoadModel("tiny-mixtral:layer", ModelOptions{Build: corpus.Options{Seq: 4, Past: -1, Weights: quant.AWQ}})
	require.NoError(t, err)
	_, err = Compile(t.Context(), md, Options{})
	require.ErrorContains(t, err, ".qweight: awq experts are not implemented")
}

// quantQKV is the query, key and value projections of one input x [M, H]
// normalized by an RMS norm, their weights quantized in format f
// (quantWeight; the key and value of grouped-query attention narrower
// than the query).
func quantQKV(t *testing.T, f quant.Format, dt ir.DType, M, H, Q, KV int) *ir.Graph {
	b := ir.NewBuilder("qkv")
	x := b.RMSNorm(b.Input("x", dt, ir.Dim(M), ir.Dim(H)), b.Weight("norm", dt, ir.Dim(H)), 1e-5)
	weight := quantWeight(b, f, dt)
	b.Output("q", b.MatMul(x, weight("wq", Q, H)))
	b.Output("k", b.MatMul(x, weight("wk", KV, H)))
	b.Output("v", b.MatMul(x, weight("wv", KV, H)))
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

// TestQuantizedMergedProjectionsCompile: a decode row's query, key and
// value projections of one normalized input, their weights quantized,
// compile into one matrix-vector launch that reads the three weights'
// packed operands in place (mxfp4 and fp8: six arguments), or, where
// three weights' operands are more than a kernel takes (awq's and gptq's
// nine), into two, one of them merging two projections; no launch runs
// at load time, none writes a dequantized copy, and the program matches
// the reference under the emulation.
func TestQuantizedMergedProjectionsCompile(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("the CPU emulation needs g++")
	}
	for _, c := range []struct {
		f        quant.Format
		launches int
	}{{quant.MXFP4, 1}, {quant.FP8, 1}, {quant.AWQ, 2}, {quant.GPTQ, 2}} {
		t.Run(c.f.String(), func(t *testing.T) {
			t.Setenv(tunedb.EnvPath, filepath.Join(t.TempDir(), "tunedb.jsonl"))
			g := quantQKV(t, c.f, ir.BF16, 1, 256, 128, 64)
			weights, err := ir.RandomLeaves(g, 5, ir.Typical, ir.OpWeight)
			require.NoError(t, err)
			var log bytes.Buffer
			res, err := Compile(t.Context(), &Model{Name: "qkv", Graph: g, Weights: weights}, Options{Events: NewPrinter(&log, false).Event})
			require.NoError(t, err, log.String())
			assert.Contains(t, res.Verified, "the whole program matches the reference interpreter")
			lp := res.final.compiled.lowered
			assert.Empty(t, lp.Prep, "nothing is prepared at load time")
			var projections []string
			for _, l := range lp.Run {
				t.Logf("%s:\n%s", l.Name, l.Body)
				if strings.Contains(l.Body.String(), "dequant") {
					projections = append(projections, l.Name)
				}
			}
			assert.Len(t, projections, c.launches, "the launches reading the three weights")
			for _, k := range res.final.compiled.kernels {
				if slices.Contains(projections, k.Name) {
					assert.True(t, k.Schedule.GEMV, "%s: a decode row's projection streams its packed weight (%s)", k.Name, k.Schedule)
				}
			}
			t.Logf("%s", log.String())
		})
	}
}
