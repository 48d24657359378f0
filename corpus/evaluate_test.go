package corpus

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEvaluate(t *testing.T) {
	g, err := Build("tiny-llama:mlp", Options{Seq: 4})
	require.NoError(t, err)
	own, err := RandomWeights(g, 9)
	require.NoError(t, err)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name    string
		ctx     context.Context
		weights map[string]*ir.Tensor
		wantErr error
	}{
		{name: "random weights", ctx: context.Background()},
		{name: "the model's own weights", ctx: context.Background(), weights: own},
		{name: "canceled", ctx: canceled, wantErr: context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := Evaluate(tt.ctx, "tiny-llama:mlp", g, tt.weights, 5, 1500*time.Microsecond)
			if tt.wantErr != nil {
				assert.ErrorIs(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, 1500*time.Microsecond, ev.Build)
			assert.Equal(t, uint64(5), ev.Seed)
			if tt.weights != nil {
				assert.Contains(t, tt.weights, g.Node(g.Inputs()[0]).Name, "the inputs join the given weights")
			}
			for _, o := range g.Outputs {
				require.Contains(t, ev.Result.Outputs, o.Name)
			}
			var b strings.Builder
			require.NoError(t, ev.WriteText(&b))
			lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
			require.Len(t, lines, 4+len(g.Outputs))
			assert.Regexp(t, `^graph: +tiny-llama:mlp \(\d+ ops, \d+ parameters\)$`, lines[0])
			assert.Equal(t, "build:    2ms", lines[1])
			assert.Regexp(t, `^random: +\S+ \(inputs, and weights unless the model has them; seed 5\)$`, lines[2])
			assert.Regexp(t, `^evaluate: \S+ \(float64 reference interpreter\)$`, lines[3])
			assert.Regexp(t, `^output \S+: f32\[1,4,64\]$`, lines[4])
		})
	}
}

// TestEvaluateErrors: weights that cannot be drawn are an error naming
// the graph.
func TestEvaluateErrors(t *testing.T) {
	intWeight, err := ir.Parse("graph w\n%0 = weight \"w\" i32[2]\noutput \"y\" = %0\n")
	require.NoError(t, err)
	tests := []struct {
		name string
		g    *ir.Graph
		want string
	}{
		{"no-graph", nil, "weights for no-graph: random weights: no graph"},
		{"int-weight", intWeight, `weights for int-weight: random weights: weight "w" is i32; want a float type`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Evaluate(context.Background(), tt.name, tt.g, nil, 1, 0)
			assert.EqualError(t, err, tt.want)
		})
	}
}
