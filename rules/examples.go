package rules

import (
	"math"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
)

// Examples of the terms the built-in Go appliers rewrite, for the verifier
// (RegisterExamples): left sides that random draws seldom fit, at the
// sizes their conditions ask for (split-K needs K >= SplitKMin), in the
// forms models have them (the decomposed attention of the builders and
// exporters, with GQA, a scale and a causal mask), in every float dtype.
func init() {
	RegisterExamples("tile_split_k", splitKExamples)
	RegisterExamples("tile_split_k_fine", splitKExamples)
	RegisterExamples("tile_split_sum", splitSumExamples)
	RegisterExamples("tile_kv_attention", kvAttentionExamples)
	RegisterExamples("tile_kv_attention_op", kvAttentionOpExamples)
	RegisterExamples("merge_matmuls", mergeMatmulsExamples)
	RegisterExamples("rms_norm_recognize", rmsNormRecognizeExamples)
}

// examplesOfBuilds builds one graph per function.
func examplesOfBuilds(name string, builds ...func(b *ir.Builder)) ([]*ir.Graph, error) {
	var out []*ir.Graph
	for _, build := range builds {
		b := ir.NewBuilder(name)
		build(b)
		g, err := b.Build()
		if err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, nil
}

func splitKExamples(dt ir.DType) ([]*ir.Graph, error) {
	return examplesOfBuilds("split-k",
		func(b *ir.Builder) { // a projection with an [out, in] weight
			x := b.Input("x", dt, 4, 4096)
			w := b.Weight("w", dt, 6, 4096)
			b.Output("y", b.MatMul(x, b.Transpose(w, 0, 1)))
		},
		func(b *ir.Builder) { // batched, both operands inputs
			b.Output("z", b.MatMul(b.Input("x", dt, 2, 3, 2048), b.Input("y", dt, 2, 2048, 5)))
		},
		func(b *ir.Builder) { // llama's down projection
			b.Output("y", b.MatMul(b.Input("x", dt, 2, 14336), b.Weight("w", dt, 14336, 3)))
		})
}

func splitSumExamples(dt ir.DType) ([]*ir.Graph, error) {
	return examplesOfBuilds("split-sum",
		func(b *ir.Builder) { // an RMS norm's sum of squares
			x := b.Input("x", dt, 1, 3, 4096)
			b.Output("y", b.Sum(b.Mul(x, x), 2))
		},
		func(b *ir.Builder) {
			b.Output("y", b.Sum(b.Input("x", dt, 2, 6144), -1))
		})
}

func kvAttentionExamples(dt ir.DType) ([]*ir.Graph, error) {
	lowest, inf := tileLowest(dt), math.Inf(-1)
	var builds []func(b *ir.Builder)
	for _, a := range []struct {
		heads, kvHeads, s, t, d int
		stride                  int64
		scale, fill             float64
	}{
		{4, 2, 4, 512, 8, 170, 1 / math.Sqrt(8), lowest}, // llama's form: GQA, a scale, a causal mask
		{2, 2, 1, 768, 4, 0, 1, 0},                       // decode: one query, no scale, no mask
		{4, 4, 1, 512, 8, 0, 1 / math.Sqrt(8), 0},        // decode with a scale
		{2, 2, 2, 1024, 4, 400, 0.25, lowest},            // four blocks, the last two masked for row 0
		{2, 1, 2, 768, 4, 300, 1, lowest},                // three blocks, one query head group
		{2, 1, 3, 512, 4, 200, 0.5, inf},                 // a mask of -inf: whole key blocks masked
		{4, 1, 2, 512, 4, 100, 0.5, inf},
	} {
		builds = append(builds, func(b *ir.Builder) {
			decomposedAttention(b, dt, a.heads, a.kvHeads, a.s, a.t, a.d, a.stride, a.scale, a.fill)
		})
	}
	for _, sh := range [][2]ir.Shape{ // opaque scores, a composite softmax
		{{2, 3, 1024}, {2, 1024, 4}},
		{{3, 512}, {512, 6}},
		{{1, 2, 2, 768}, {1, 2, 768, 4}},
		{{2, 512}, {512, 3}},
		{{1, 1, 1024}, {1, 1024, 2}},
	} {
		builds = append(builds, func(b *ir.Builder) {
			s := b.Input("scores", dt, sh[0]...)
			b.Output("out", b.MatMul(b.Softmax(s, -1), b.Input("v", dt, sh[1]...)))
		})
	}
	return examplesOfBuilds("kv-attention", builds...)
}

func kvAttentionOpExamples(dt ir.DType) ([]*ir.Graph, error) {
	var builds []func(b *ir.Builder)
	for _, a := range []struct {
		q, kv  ir.Shape
		scale  float64
		causal bool
		offset int64
	}{
		{ir.Shape{1, 4, 3, 8}, ir.Shape{1, 2, 512, 8}, 1 / math.Sqrt(8), true, 200}, // causal, GQA
		{ir.Shape{2, 2, 1, 4}, ir.Shape{2, 2, 1024, 4}, 0.5, false, 0},              // decode, not causal
		{ir.Shape{1, 2, 1, 4}, ir.Shape{1, 2, 768, 4}, 0.5, true, 767},              // decode, causal
		{ir.Shape{1, 2, 4, 4}, ir.Shape{1, 1, 512, 4}, 1, true, 0},                  // prefill: later blocks masked
		{ir.Shape{1, 4, 2, 4}, ir.Shape{1, 2, 768, 4}, 0.25, false, 0},
		{ir.Shape{1, 1, 1, 8}, ir.Shape{1, 1, 512, 8}, 1 / math.Sqrt(8), true, 300},
		{ir.Shape{1, 2, 2, 8}, ir.Shape{1, 2, 1024, 8}, 1 / math.Sqrt(8), true, 600},
		{ir.Shape{2, 1, 1, 4}, ir.Shape{2, 1, 512, 4}, 2, false, 0},
	} {
		builds = append(builds, func(b *ir.Builder) {
			q, k, v := b.Input("q", dt, a.q...), b.Input("k", dt, a.kv...), b.Input("v", dt, a.kv...)
			b.Output("out", b.Attention(q, k, v, a.scale, a.causal, a.offset))
		})
	}
	return examplesOfBuilds("kv-attention-op", builds...)
}

func mergeMatmulsExamples(dt ir.DType) ([]*ir.Graph, error) {
	var builds []func(b *ir.Builder)
	// Quantized weights, read through their dequants (mxfp4's and fp8's
	// [N, K] transposed, awq's and gptq's [K, N]), first: the verifier
	// takes the examples in order until it has its instances.
	for _, c := range []struct {
		f      quant.Format
		x      ir.Shape
		na, nb ir.Dim
	}{
		{quant.MXFP4, ir.Shape{2, 64}, 8, 4},
		{quant.FP8, ir.Shape{3, 32}, 6, 10},
		{quant.AWQ, ir.Shape{1, 32}, 16, 8},
		{quant.GPTQ, ir.Shape{2, 16}, 8, 16},
	} {
		builds = append(builds, func(b *ir.Builder) {
			x := b.Input("x", dt, c.x...)
			K := c.x[1]
			w := func(name string, N ir.Dim) ir.Value {
				switch c.f {
				case quant.MXFP4:
					return b.Transpose(b.Dequant(c.f, dt, 32, 0, b.Weight(name+".blocks", ir.U8, N, K/32, 16), b.Weight(name+".scales", ir.U8, N, K/32)), 0, 1)
				case quant.FP8:
					return b.Transpose(b.Dequant(c.f, dt, 16, 1, b.Weight(name+".weight", ir.U8, N, K), b.Weight(name+".scale", ir.F32, N, K/16)), 0, 1)
				case quant.AWQ:
					return b.Dequant(c.f, dt, 16, 0, b.Weight(name+".qweight", ir.I32, K, N/8), b.Weight(name+".scales", ir.F16, K/16, N), b.Weight(name+".qzeros", ir.I32, K/16, N/8))
				}
				return b.Dequant(c.f, dt, 16, 0, b.Weight(name+".qweight", ir.I32, K/8, N), b.Weight(name+".scales", ir.F16, K/16, N), b.Weight(name+".qzeros", ir.I32, K/16, N/8))
			}
			b.Output("a", b.MatMul(x, w("wa", c.na)))
			b.Output("b", b.MatMul(x, w("wb", c.nb)))
		})
	}
	for _, sh := range [][3]ir.Shape{ // x, and two weights it is multiplied with
		{{3, 8}, {8, 5}, {8, 6}}, // Q and K projections of one input
		{{2, 4}, {4, 3}, {4, 2}},
		{{4, 16}, {16, 16}, {16, 4}},
		{{1, 6}, {6, 2}, {6, 6}},
		{{5, 3}, {3, 7}, {3, 1}},
		{{2, 32}, {32, 8}, {32, 8}}, // gate and up
		{{6, 2}, {2, 4}, {2, 3}},
	} {
		builds = append(builds, func(b *ir.Builder) {
			x := b.Input("x", dt, sh[0]...)
			b.Output("a", b.MatMul(x, b.Weight("wa", dt, sh[1]...)))
			b.Output("b", b.MatMul(x, b.Weight("wb", dt, sh[2]...)))
		})
	}
	return examplesOfBuilds("merge-matmuls", builds...)
}

// rmsNormRecognizeExamples builds the decomposed RMS norm the applier
// recognizes: w * (x * rsqrt(sum(x*x) * (1/n) + eps)), the constants
// splats of the row shape, at several shapes and epsilons.
func rmsNormRecognizeExamples(dt ir.DType) ([]*ir.Graph, error) {
	var builds []func(b *ir.Builder)
	for _, a := range []struct {
		shape ir.Shape
		eps   float64
	}{
		{ir.Shape{2, 3, 8}, 1e-5}, {ir.Shape{4, 16}, 1e-6}, {ir.Shape{8}, 1e-5}, {ir.Shape{1, 2, 2, 4}, 1e-2},
		{ir.Shape{3, 32}, 1e-5}, {ir.Shape{2, 64}, 1e-6}, {ir.Shape{5, 4}, 1e-5},
	} {
		builds = append(builds, func(b *ir.Builder) {
			xs := a.shape
			r := len(xs)
			n := xs[r-1]
			row := append(xs[:r-1:r-1], 1)
			ones := make(ir.Shape, r)
			for i := range ones {
				ones[i] = 1
			}
			ones[r-1] = n
			x := b.Input("x", dt, xs...)
			w := b.Weight("w", dt, n)
			ms := b.Apply(ir.OpMul, ir.Attrs{}, b.Sum(b.Apply(ir.OpMul, ir.Attrs{}, x, x), r-1), b.Const(dt, row, dt.Round(1/float64(n))))
			rs := b.Apply(ir.OpRsqrt, ir.Attrs{}, b.Apply(ir.OpAdd, ir.Attrs{}, ms, b.Const(dt, row, dt.Round(a.eps))))
			y := b.Apply(ir.OpMul, ir.Attrs{}, x, b.Expand(rs, xs...))
			b.Output("y", b.Apply(ir.OpMul, ir.Attrs{}, b.Expand(b.Reshape(w, ones...), xs...), y))
		})
	}
	return examplesOfBuilds("rms-norm-recognize", builds...)
}

// decomposedAttention builds softmax(q k^T * scale + mask) v as the corpus
// builders and exporters do (repeat_kv by views, a decomposed softmax) in
// dt, with queries at positions 0, stride, 2*stride, ... for the causal
// mask (stride 0: no mask), masked scores getting fill, so that some rows
// see no key of a later block.
func decomposedAttention(b *ir.Builder, dt ir.DType, heads, kvHeads, s, t, d int, stride int64, scale, fill float64) {
	q := b.Input("q", dt, 1, ir.Dim(heads), ir.Dim(s), ir.Dim(d))
	k := b.Input("k", dt, 1, ir.Dim(kvHeads), ir.Dim(t), ir.Dim(d))
	v := b.Input("v", dt, 1, ir.Dim(kvHeads), ir.Dim(t), ir.Dim(d))
	if n := heads / kvHeads; n > 1 {
		rep := func(x ir.Value) ir.Value {
			x = b.Reshape(x, 1, ir.Dim(kvHeads), 1, ir.Dim(t), ir.Dim(d))
			x = b.Expand(x, 1, ir.Dim(kvHeads), ir.Dim(n), ir.Dim(t), ir.Dim(d))
			return b.Reshape(x, 1, ir.Dim(heads), ir.Dim(t), ir.Dim(d))
		}
		k, v = rep(k), rep(v)
	}
	sc := b.MatMul(q, b.Transpose(k, 2, 3))
	if scale != 1 {
		sc = b.Mul(sc, b.Scalar(dt, dt.Round(scale)))
	}
	if stride > 0 {
		shape := ir.Shape{ir.Dim(s), ir.Dim(t)}
		pos := b.Mul(b.Iota(ir.I64, shape, 0), b.Scalar(ir.I64, float64(stride)))
		see := b.Binary(ir.OpGe, b.Sub(pos, b.Iota(ir.I64, shape, 1)), b.Scalar(ir.I64, 0))
		sc = b.Add(sc, b.Where(see, b.Scalar(dt, 0), b.Scalar(dt, fill)))
	}
	ex := b.Exp(b.Sub(sc, b.ReduceMax(sc, 3)))
	b.Output("out", b.MatMul(b.Div(ex, b.Sum(ex, 3)), v))
}
