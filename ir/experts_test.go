package ir

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTopKAndMargin(t *testing.T) {
	cases := []struct {
		name   string
		xs     []float64
		k      int
		want   []int
		margin float64
	}{
		{"distinct", []float64{0.5, 2, -1, 1}, 2, []int{1, 3}, 0.5},
		{"tie goes to the lower index", []float64{1, 3, 3, 0}, 1, []int{1}, 0},
		{"tie inside the chosen", []float64{1, 3, 3, 0}, 2, []int{1, 2}, 2},
		{"all chosen", []float64{1, 2}, 2, []int{1, 0}, math.Inf(1)},
		{"NaN first", []float64{1, math.NaN(), 5}, 1, []int{1}, math.NaN()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, TopK(c.xs, c.k))
			m := RouteMargin(c.xs, c.k)
			if math.IsNaN(c.margin) {
				require.True(t, math.IsNaN(m))
			} else {
				require.Equal(t, c.margin, m)
			}
		})
	}
}

func TestRouteWeights(t *testing.T) {
	logits := []float64{0, 1, 2, 3}
	run := func(k int, g Gating) []float64 {
		b := NewBuilder("route")
		b.Output("w", b.Route(b.Input("l", F32, 1, 4), k, g))
		gr, err := b.Build()
		require.NoError(t, err)
		res, err := Eval(context.Background(), gr, map[string]*Tensor{"l": mustTensor(t, F32, Shape{1, 4}, logits...)}, EvalOptions{})
		require.NoError(t, err)
		return res.Outputs["w"].F64
	}
	e := math.E
	chosen := run(2, GatingChosen)
	require.InDeltaSlice(t, []float64{0, 0, 1 / (1 + e), e / (1 + e)}, chosen, 1e-15)
	all := run(2, GatingAll)
	z := 1 + e + e*e + e*e*e
	require.InDeltaSlice(t, []float64{0, 0, e * e / z, e * e * e / z}, all, 1e-15)
}

// expertsByOps spells experts out in the elementwise, slice and matmul ops
// of the language, one expert at a time over every row (the loop form a
// kernel never runs, since it does all experts' work): the meaning the
// composite op must have.
func expertsByOps(b *Builder, x, w, gu, dn, gub, dnb Value, g Gating, limit float64) Value {
	xs, ws, gus := b.Shape(x), b.Shape(w), b.Shape(gu)
	R, H, E, I2 := xs[0], xs[1], ws[1], gus[2]
	I := I2 / 2
	var out Value = NoValue
	for e := range int64(E) {
		gue := b.Reshape(b.Slice(gu, 0, e, e+1, 1), H, I2)
		y := b.Add(b.MatMul(x, gue), b.Expand(b.Slice(gub, 0, e, e+1, 1), R, I2))
		var h Value
		if g == GatingSwiGLU {
			gt, up := b.Slice(y, 1, 0, int64(I), 1), b.Slice(y, 1, int64(I), int64(I2), 1)
			h = b.Mul(b.Mul(gt, b.Sigmoid(gt)), up)
		} else {
			gt, up := b.Slice(y, 1, 0, int64(I2), 2), b.Slice(y, 1, 1, int64(I2), 2)
			lim := b.Scalar(F32, limit)
			gt = b.Min(gt, lim)
			up = b.Max(b.Min(up, lim), b.Neg(lim))
			glu := b.Mul(gt, b.Sigmoid(b.Mul(gt, b.Scalar(F32, float64(float32(ClampedSwiGLUAlpha))))))
			h = b.Mul(b.Add(up, b.Scalar(F32, 1)), glu)
		}
		dne := b.Reshape(b.Slice(dn, 0, e, e+1, 1), I, H)
		ye := b.Add(b.MatMul(h, dne), b.Expand(b.Slice(dnb, 0, e, e+1, 1), R, H))
		we := b.Slice(w, 1, e, e+1, 1)
		term := b.Where(b.Binary(OpNe, we, b.Scalar(F32, 0)), b.Mul(we, ye), b.Scalar(F32, 0))
		if out == NoValue {
			out = term
		} else {
			out = b.Add(out, term)
		}
	}
	return out
}

func TestExpertsMeansItsSpelledOutForm(t *testing.T) {
	for _, g := range []Gating{GatingSwiGLU, GatingClampedSwiGLU} {
		t.Run(g.String(), func(t *testing.T) {
			const R, H, E, I, k = 5, 6, 4, 3, 2
			limit := 0.0
			if g == GatingClampedSwiGLU {
				limit = 0.75 // small, so that random values meet both clamps
			}
			b := NewBuilder("experts")
			x, logits := b.Input("x", F32, R, H), b.Input("logits", F32, R, E)
			gu, dn := b.Weight("gu", F32, E, H, 2*I), b.Weight("dn", F32, E, I, H)
			gub, dnb := b.Weight("gub", F32, E, 2*I), b.Weight("dnb", F32, E, H)
			w := b.Route(logits, k, GatingChosen)
			b.Output("op", b.Experts(x, w, gu, dn, gub, dnb, k, g, limit))
			b.Output("ops", expertsByOps(b, x, w, gu, dn, gub, dnb, g, limit))
			// Split: the slots' weighted outputs summed.
			y := b.ExpertsDown(b.ExpertsUp(x, w, gu, gub, k, g, limit), w, dn, dnb, k)
			b.Output("split", b.Reshape(b.Sum(y, 1), R, H))
			gr, err := b.Build()
			require.NoError(t, err)
			feeds, err := RandomFeeds(gr, 7, Typical)
			require.NoError(t, err)
			res, err := Eval(context.Background(), gr, feeds, EvalOptions{Magnitude: true})
			require.NoError(t, err)
			op, ops, split := res.Outputs["op"].F64, res.Outputs["ops"].F64, res.Outputs["split"].F64
			for i := range op {
				require.InDelta(t, op[i], split[i], 1e-12*(1+res.Magnitudes["op"].F64[i]), "element %d", i)
				// The spelled-out form's alpha is 1.702 rounded to f32.
				require.InDelta(t, ops[i], op[i], 1e-7*(1+res.Magnitudes["op"].F64[i]), "element %d", i)
				require.GreaterOrEqual(t, res.Magnitudes["op"].F64[i], math.Abs(op[i]))
			}
			// Points agree with the whole evaluation.
			at := []int64{0, 7, 29}
			vals, mags, err := EvalAt(context.Background(), gr, feeds, map[string][]int64{"op": at, "split": at}, EvalOptions{Magnitude: true})
			require.NoError(t, err)
			for _, o := range []string{"op", "split"} {
				for p, j := range at {
					require.Equal(t, res.Outputs[o].F64[j], vals[o][p])
					require.Equal(t, res.Magnitudes[o].F64[j], mags[o][p])
				}
			}
		})
	}
}

func TestExpertsRefusesMoreThanKChosen(t *testing.T) {
	b := NewBuilder("experts")
	x, w := b.Input("x", F32, 1, 2), b.Input("w", F32, 1, 3)
	gu, dn := b.Weight("gu", F32, 3, 2, 2), b.Weight("dn", F32, 3, 1, 2)
	gub, dnb := b.Weight("gub", F32, 3, 2), b.Weight("dnb", F32, 3, 2)
	b.Output("y", b.Experts(x, w, gu, dn, gub, dnb, 1, GatingSwiGLU, 0))
	gr, err := b.Build()
	require.NoError(t, err)
	feeds, err := RandomFeeds(gr, 1, Typical)
	require.NoError(t, err)
	feeds["w"] = mustTensor(t, F32, Shape{1, 3}, 0.5, 0, 0.5)
	_, err = Eval(context.Background(), gr, feeds, EvalOptions{})
	require.ErrorContains(t, err, "row 0 chooses 2 experts, more than k=1")
}
