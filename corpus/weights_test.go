package corpus

import (
	"math"
	"strings"
	"testing"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRandomWeights(t *testing.T) {
	for _, name := range []string{"tiny-llama:model", "tiny-qwen2:model", "tiny-gpt2:model", "tiny-qwen3-moe:model", "tiny-gpt-oss:model"} {
		for _, dt := range []ir.DType{ir.F32, ir.BF16, ir.F16} {
			g, err := Build(name, Options{Seq: 4, DType: dt})
			require.NoError(t, err)
			w, err := RandomWeights(g, 42)
			require.NoError(t, err)
			require.Len(t, w, len(g.Weights()))
			for _, v := range g.Weights() {
				n := g.Node(v)
				tn := w[n.Name]
				require.NotNil(t, tn, n.Name)
				assert.Equal(t, dt, tn.DType)
				assert.Equal(t, n.Shape, tn.Shape)
				require.Len(t, tn.F32, int(n.Shape.NumElements()), "float32 storage")
				var sum, sq float64
				nonzero := false
				for _, x := range tn.F32 {
					f := float64(x)
					assert.Equal(t, dt.Round(f), f, "rounded to %s", dt)
					sum += f
					sq += f * f
					nonzero = nonzero || f != 0
				}
				assert.True(t, nonzero, n.Name)
				count := float64(len(tn.F32))
				mean := sum / count
				sd := math.Sqrt(sq/count - mean*mean)
				switch {
				case isNormScale(n):
					for _, x := range tn.F32 {
						assert.InDelta(t, 1, x, 0.11, n.Name)
					}
				case strings.HasSuffix(n.Name, ".sinks"):
					for _, x := range tn.F32 {
						assert.LessOrEqual(t, math.Abs(float64(x)), 3*1.01, n.Name)
					}
				default:
					for _, x := range tn.F32 {
						assert.LessOrEqual(t, math.Abs(float64(x)), 3*0.02*1.01, n.Name)
					}
					if count >= 1000 {
						assert.InDelta(t, 0.02, sd, 0.002, n.Name)
						assert.InDelta(t, 0, mean, 0.002, n.Name)
					}
				}
			}
		}
	}
}

func TestRandomWeightsDeterministic(t *testing.T) {
	g, err := Build("tiny-llama:model", Options{Seq: 4})
	require.NoError(t, err)
	a, err := RandomWeights(g, 1)
	require.NoError(t, err)
	b, err := RandomWeights(g, 1)
	require.NoError(t, err)
	c, err := RandomWeights(g, 2)
	require.NoError(t, err)
	const q = "model.layers.0.self_attn.q_proj.weight"
	assert.Equal(t, a[q].F32, b[q].F32)
	assert.NotEqual(t, a[q].F32, c[q].F32)
	assert.NotEqual(t, a[q].F32, a["model.layers.1.self_attn.q_proj.weight"].F32, "layers differ")

	// A weight's values depend on its name, not on the graph it is in.
	layer, err := Build("tiny-llama:layer", Options{Seq: 9, Batch: 2})
	require.NoError(t, err)
	l, err := RandomWeights(layer, 1)
	require.NoError(t, err)
	for name, tn := range l {
		assert.Equal(t, a[name].F32, tn.F32, name)
	}
}

func TestRandomWeightsErrors(t *testing.T) {
	_, err := RandomWeights(nil, 1)
	require.Error(t, err)

	b := ir.NewBuilder("int weight")
	w := b.Weight("table", ir.I32, 4)
	b.Output("y", w)
	g, err := b.Build()
	require.NoError(t, err)
	_, err = RandomWeights(g, 1)
	require.ErrorContains(t, err, `"table"`)
}
