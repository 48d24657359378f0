package ir

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/quant"
)

// The dequant op's evaluation (whole and at points) against package
// quant's packers and decoders: a weight packed by quant.PackX, fed to a
// dequant node, must evaluate to quant.DecodeX's values rounded once to
// the node's dtype, element by element. The decoders are written from the
// element codes alone, so this checks the op's layouts (blocks, words,
// scale groups, batch axes) against the checkpoints' own.

// dequantCase is one quantized weight: its leaves, fed by name, and the
// values quant decodes them to.
type dequantCase struct {
	name   string
	format quant.Format
	group  int64
	groupN int64
	leaves []dequantLeaf // codes, scales[, zeros]
	want   []float64
}

// dequantLeaf is one operand of a dequant, in the dtype and shape the op
// reads it as.
type dequantLeaf struct {
	dt    DType
	shape Shape
	ints  []int64   // for u8 and i32
	vals  []float64 // for floats
}

func (l dequantLeaf) tensor(t *testing.T) *Tensor {
	t.Helper()
	var x *Tensor
	var err error
	if l.dt.IsInt() {
		x, err = TensorOfInts(l.dt, l.shape, l.ints...)
	} else {
		x, err = TensorOf(l.dt, l.shape, l.vals...)
	}
	require.NoError(t, err)
	return x
}

func bytesToInts(b []uint8) []int64 {
	out := make([]int64, len(b))
	for i, x := range b {
		out[i] = int64(x)
	}
	return out
}

func wordsToInts(w []int32) []int64 {
	out := make([]int64, len(w))
	for i, x := range w {
		out[i] = int64(x)
	}
	return out
}

func float32s(s []float32) []float64 {
	out := make([]float64, len(s))
	for i, x := range s {
		out[i] = float64(x)
	}
	return out
}

// batch stacks the per-expert pieces of each leaf and of the values
// along a new leading axis of extent len(parts).
func batch(parts []dequantCase) dequantCase {
	c := parts[0]
	c.leaves = append([]dequantLeaf(nil), c.leaves...)
	c.want = nil
	for i := range c.leaves {
		l := &c.leaves[i]
		l.shape = append(Shape{Dim(len(parts))}, l.shape...)
		l.ints, l.vals = nil, nil
		for _, p := range parts {
			l.ints = append(l.ints, p.leaves[i].ints...)
			l.vals = append(l.vals, p.leaves[i].vals...)
		}
	}
	for _, p := range parts {
		c.want = append(c.want, p.want...)
	}
	return c
}

func randomMatrix(r *rand.Rand, n int) []float64 {
	w := make([]float64, n)
	for i := range w {
		w[i] = r.NormFloat64() * 0.03
	}
	return w
}

func mxfp4Case(t *testing.T, w []float64, N, K int) dequantCase {
	blocks, scales, err := quant.PackMXFP4(w, N, K)
	require.NoError(t, err)
	want, err := quant.DecodeMXFP4(blocks, scales, N, K)
	require.NoError(t, err)
	return dequantCase{"mxfp4", quant.MXFP4, 32, 0, []dequantLeaf{
		{U8, Shape{Dim(N), Dim(K / 32), 16}, bytesToInts(blocks), nil},
		{U8, Shape{Dim(N), Dim(K / 32)}, bytesToInts(scales), nil},
	}, want}
}

func fp8Case(t *testing.T, w []float64, N, K, groupN, groupK int) dequantCase {
	codes, scales, err := quant.PackFP8(w, N, K, groupN, groupK)
	require.NoError(t, err)
	want, err := quant.DecodeFP8(codes, scales, N, K, groupN, groupK)
	require.NoError(t, err)
	sn, sk := (N-1)/groupN+1, (K-1)/groupK+1
	return dequantCase{"fp8", quant.FP8, int64(groupK), int64(groupN), []dequantLeaf{
		{U8, Shape{Dim(N), Dim(K)}, bytesToInts(codes), nil},
		{F32, Shape{Dim(sn), Dim(sk)}, nil, float32s(scales)},
	}, want}
}

func int4Case(t *testing.T, f quant.Format, w []float64, K, N, group int) dequantCase {
	pack, decode := quant.PackAWQ, quant.DecodeAWQ
	qshape := Shape{Dim(K), Dim(N / 8)}
	if f == quant.GPTQ {
		pack, decode = quant.PackGPTQ, quant.DecodeGPTQ
		qshape = Shape{Dim(K / 8), Dim(N)}
	}
	qweight, qzeros, scales, err := pack(w, K, N, group)
	require.NoError(t, err)
	want, err := decode(qweight, qzeros, scales, K, N, group)
	require.NoError(t, err)
	G := K / group
	return dequantCase{f.String(), f, int64(group), 0, []dequantLeaf{
		{I32, qshape, wordsToInts(qweight), nil},
		{F16, Shape{Dim(G), Dim(N)}, nil, scales},
		{I32, Shape{Dim(G), Dim(N / 8)}, wordsToInts(qzeros), nil},
	}, want}
}

func dequantCases(t *testing.T) []dequantCase {
	r := rand.New(rand.NewPCG(7, 7))
	var cases []dequantCase
	// Two experts of each format, so the batch axis is exercised too.
	mx := make([]dequantCase, 2)
	fp := make([]dequantCase, 2)
	aw := make([]dequantCase, 2)
	gq := make([]dequantCase, 2)
	for e := range 2 {
		mx[e] = mxfp4Case(t, randomMatrix(r, 3*64), 3, 64)
		fp[e] = fp8Case(t, randomMatrix(r, 5*7), 5, 7, 2, 3)
		aw[e] = int4Case(t, quant.AWQ, randomMatrix(r, 16*16), 16, 16, 8)
		gq[e] = int4Case(t, quant.GPTQ, randomMatrix(r, 16*8), 16, 8, 4)
	}
	cases = append(cases, batch(mx), batch(fp), batch(aw), batch(gq))
	cases = append(cases,
		fp8Case(t, randomMatrix(r, 4*6), 4, 6, 4, 6), // per tensor
		fp8Case(t, randomMatrix(r, 4*6), 4, 6, 1, 6), // per channel
	)
	// Weights whose codes include every e2m1 code, both signs of zero and
	// words whose top bit is set (negative int32s).
	golden := make([]float64, 64)
	for i := range golden {
		golden[i] = quant.E2M1(uint8(i%16)) * math.Ldexp(1, i/16-2)
	}
	cases = append(cases, mxfp4Case(t, golden, 2, 32))
	top := make([]float64, 8*8)
	for i := range top {
		top[i] = float64(i%16) - 7.5
	}
	cases = append(cases, int4Case(t, quant.AWQ, top, 8, 8, 8), int4Case(t, quant.GPTQ, top, 8, 8, 8))
	return cases
}

// sameBits reports whether got is want, bit for bit, any NaN matching.
func sameBits(want, got float64) bool {
	if math.IsNaN(want) {
		return math.IsNaN(got)
	}
	return math.Float64bits(want) == math.Float64bits(got)
}

func TestDequantMatchesQuantDecoders(t *testing.T) {
	ctx := context.Background()
	for _, c := range dequantCases(t) {
		for _, dt := range []DType{F32, F16, BF16} {
			b := NewBuilder("dequant")
			names := []string{"codes", "scales", "zeros"}
			feeds := map[string]*Tensor{}
			args := make([]Value, len(c.leaves))
			for i, l := range c.leaves {
				args[i] = b.Weight(names[i], l.dt, l.shape...)
				feeds[names[i]] = l.tensor(t)
			}
			b.Output("w", b.Dequant(c.format, dt, c.group, c.groupN, args[0], args[1], args[2:]...))
			g, err := b.Build()
			require.NoError(t, err, "%s %s", c.name, dt)
			res, err := Eval(ctx, g, feeds, EvalOptions{})
			require.NoError(t, err, "%s %s", c.name, dt)
			out := res.Outputs["w"]
			require.Equal(t, int64(len(c.want)), out.Len(), "%s %s", c.name, dt)
			var idx []int64
			for i, want := range c.want {
				want = dt.Round(want)
				assert.True(t, sameBits(want, out.At(int64(i))), "%s %s element %d: %v, want %v", c.name, dt, i, out.At(int64(i)), want)
				if i%5 == 0 {
					idx = append(idx, int64(i))
				}
			}
			vals, _, err := EvalAt(ctx, g, feeds, map[string][]int64{"w": idx}, EvalOptions{})
			require.NoError(t, err, "%s %s", c.name, dt)
			for p, i := range idx {
				want := dt.Round(c.want[i])
				assert.True(t, sameBits(want, vals["w"][p]), "%s %s point %d: %v, want %v", c.name, dt, i, vals["w"][p], want)
			}
		}
	}
}

// TestDequantRefusals: operands that do not make a weight of the format
// are refused by shape inference, naming what is wrong, never evaluated
// into a panic.
func TestDequantRefusals(t *testing.T) {
	for _, c := range []struct {
		name  string
		build func(b *Builder) Value
		want  string
	}{
		{"gptq columns not whole words", func(b *Builder) Value {
			return b.Dequant(quant.GPTQ, F32, 16, 0, b.Input("q", I32, 2, 12), b.Input("s", F16, 1, 12), b.Input("z", I32, 1, 1))
		}, "N=12 is no multiple of 8"},
		{"fp8 without rows", func(b *Builder) Value {
			return b.Dequant(quant.FP8, F32, 64, 1, b.Input("c", U8, 0, 64), b.Input("s", F32, 0, 1))
		}, "extent 0 on axis 0"},
		{"mxfp4 scales of another shape", func(b *Builder) Value {
			return b.Dequant(quant.MXFP4, BF16, 32, 0, b.Input("c", U8, 4, 2, 16), b.Input("s", U8, 4, 1))
		}, "mxfp4 scales"},
		{"awq without zero points", func(b *Builder) Value {
			return b.Dequant(quant.AWQ, BF16, 16, 0, b.Input("q", I32, 16, 1), b.Input("s", F16, 1, 8))
		}, "awq takes codes, scales and zero points"},
		{"an integer result", func(b *Builder) Value {
			return b.Dequant(quant.MXFP4, I32, 32, 0, b.Input("c", U8, 4, 1, 16), b.Input("s", U8, 4, 1))
		}, "a dequantized weight is f32, f16 or bf16"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := NewBuilder("bad")
			b.Output("w", c.build(b))
			_, err := b.Build()
			require.ErrorContains(t, err, c.want)
		})
	}
}

// TestDequantFeedsThroughReshapes: packed operands seen through reshapes
// (a checkpoint's flat bytes viewed as blocks) are drawn as the format's
// codes and scales, never as raw random bytes (an e8m0 scale of 0xFF is
// NaN, one of 250 a weight of 2^123).
func TestDequantFeedsThroughReshapes(t *testing.T) {
	b := NewBuilder("reshaped")
	blocks := b.Reshape(b.Weight("w_packed", U8, 4, 32), 4, 2, 16)
	scales := b.Reshape(b.Weight("w_scale", U8, 8), 4, 2)
	b.Output("w", b.Dequant(quant.MXFP4, F32, 32, 0, blocks, scales))
	g, err := b.Build()
	require.NoError(t, err)
	feeds, err := RandomFeeds(g, 3, Typical)
	require.NoError(t, err)
	for i := range feeds["w_scale"].Len() {
		s := feeds["w_scale"].Int(i)
		require.True(t, s >= 119 && s <= 124, "scale %d is %d", i, s)
	}
}
