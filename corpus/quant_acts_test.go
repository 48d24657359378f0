package corpus

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
)

// TestQuantizedActs: a W8A8 projection's input activations are what the
// checkpoint's quantizer makes of them, in float64: each token's row (or
// each group of a row's inputs) divided by its largest magnitude over
// 448, or by the checkpoint's input_scale, rounded to e4m3 with
// saturation, and multiplied back; a row of zeros stays zeros.
func TestQuantizedActs(t *testing.T) {
	const rows, in = 3, 32
	for _, c := range []struct {
		name string
		acts ActQuant
	}{{"per token", ActQuant{}}, {"per group of 8", ActQuant{Group: 8}}, {"static", ActQuant{Static: true}}} {
		t.Run(c.name, func(t *testing.T) {
			e := newEmitter("acts", &Config{}, Options{DType: ir.BF16}, &Quantization{Format: quant.FP8, Acts: &c.acts})
			x := e.Input("x", ir.BF16, rows, in)
			e.Output("y", e.quantizedActs(x, "p", in))
			g, err := e.Build()
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(4, 1))
			xs := make([]float64, rows*in)
			for i := range xs {
				if i/in != 1 { // row 1 stays zeros
					xs[i] = ir.BF16.Round(rng.NormFloat64() * 3)
				}
			}
			feeds := map[string]*ir.Tensor{}
			feeds["x"], err = ir.TensorOf(ir.BF16, ir.Shape{rows, in}, xs...)
			require.NoError(t, err)
			const static = 0.0078125
			if c.acts.Static {
				feeds["p.input_scale"], err = ir.TensorOf(ir.F32, ir.Shape{1}, static)
				require.NoError(t, err)
			}
			res, err := ir.Eval(context.Background(), g, feeds, ir.EvalOptions{})
			require.NoError(t, err)
			group := in
			if c.acts.Group > 0 {
				group = c.acts.Group
			}
			for r := range rows {
				for g0 := 0; g0 < in; g0 += group {
					s := static
					if !c.acts.Static {
						amax := 0x1p-24
						for _, v := range xs[r*in+g0 : r*in+g0+group] {
							amax = math.Max(amax, math.Abs(v))
						}
						s = float64(float32(float32(amax) / 448))
					}
					for j := g0; j < g0+group; j++ {
						want := quant.SaturateE4M3(float64(float32(xs[r*in+j])/float32(s))) * s
						require.InDelta(t, want, res.Outputs["y"].At(int64(r*in+j)), 1e-6*math.Abs(want), "row %d input %d", r, j)
						if r == 1 {
							require.Zero(t, res.Outputs["y"].At(int64(r*in+j)))
						}
					}
				}
			}
		})
	}
}
