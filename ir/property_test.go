package ir

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// randomGraph builds a seeded random graph of shape-preserving steps over
// f32[2,3,4] values, touching every op class.
func randomGraph(seed uint64) (*Graph, error) {
	rng := rand.New(rand.NewPCG(seed, 99))
	b := NewBuilder(fmt.Sprint("random", seed))
	shape := Shape{2, 3, 4}
	vals := []Value{b.Input("x", F32, shape...), b.Input("y", F32, shape...)}
	pick := func() Value { return vals[rng.IntN(len(vals))] }
	for range 12 {
		var v Value
		switch rng.IntN(14) {
		case 0:
			v = b.Unary([]Op{OpNeg, OpAbs, OpExp, OpTanh, OpSigmoid, OpErf, OpRelu, OpSin, OpCos}[rng.IntN(9)], b.Mul(pick(), b.Scalar(F32, 0.5)))
		case 1:
			v = b.Binary([]Op{OpAdd, OpSub, OpMul, OpMax, OpMin}[rng.IntN(5)], pick(), pick())
		case 2:
			v = b.Div(pick(), b.Add(b.Abs(pick()), b.Scalar(F32, 1)))
		case 3:
			v = b.Where(b.Binary(OpLt, pick(), pick()), pick(), pick())
		case 4:
			v = b.BroadcastTo(b.Sum(pick(), rng.IntN(3)), shape)
		case 5:
			v = b.BroadcastTo(b.ReduceMax(pick(), rng.IntN(3)), shape)
		case 6:
			v = b.Softmax(pick(), rng.IntN(3))
		case 7:
			v = b.RMSNorm(pick(), b.Weight(fmt.Sprint("w", len(vals)), F32, 4), 1e-6)
		case 8:
			v = b.LayerNorm(pick(), b.Weight(fmt.Sprint("w", len(vals)), F32, 4), b.Weight(fmt.Sprint("c", len(vals)), F32, 4), 1e-5)
		case 9:
			v = b.Permute(b.Permute(pick(), 2, 0, 1), 1, 2, 0)
		case 10:
			v = b.Pad(b.Slice(pick(), 2, 1, 4, 1), []int64{0, 0, 1}, []int64{0, 0, 0}, 0.5)
		case 11:
			x := pick()
			v = b.Slice(b.Concat(1, x, pick()), 1, 1, 4, 1)
		case 12:
			v = b.Cast(b.Cast(pick(), F16), F32)
		case 13:
			v = b.MatMul(pick(), b.Permute(pick(), 0, 2, 1))
			v = b.MatMul(v, pick())
		}
		vals = append(vals, v)
	}
	b.Output("out", vals[len(vals)-1])
	b.Output("mid", vals[len(vals)/2])
	return b.Build()
}

// TestElementsAgreeWithEval checks the two evaluation paths against each
// other on random graphs.
func TestElementsAgreeWithEval(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			g, err := randomGraph(seed)
			require.NoError(t, err)
			feeds, err := RandomFeeds(g, seed, Typical)
			require.NoError(t, err)
			res, err := Eval(context.Background(), g, feeds, EvalOptions{Magnitude: true})
			require.NoError(t, err)
			for _, o := range g.Outputs {
				requireElementsAgree(t, g, feeds, o.Value, res.Outputs[o.Name])
				m := res.Magnitudes[o.Name]
				for i := range m.Len() {
					require.GreaterOrEqual(t, m.At(i)*(1+1e-12), absf(res.Outputs[o.Name].At(i)))
				}
			}
			// The text form round-trips and evaluates the same.
			again, err := Parse(g.String())
			require.NoError(t, err)
			res2, err := Eval(context.Background(), again, feeds, EvalOptions{})
			require.NoError(t, err)
			require.Equal(t, res.Outputs["out"].F64, res2.Outputs["out"].F64)
		})
	}
}

func absf(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
