package corpus

import (
	"math"
	"testing"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests of the mixture-of-experts families against moeRef (see
// moe_ref_test.go).

var moeConfigs = []string{"tiny-mixtral", "tiny-qwen3-moe", "tiny-gpt-oss"}

// moeModelRun builds name's model kind over seq tokens with seeded random
// weights and runs it: the graph's logits, the weights and the ids.
func moeModelRun(t *testing.T, c *Config, seq int) (*ir.Tensor, map[string]*ir.Tensor, []int) {
	t.Helper()
	g, err := BuildConfig(c.Name+":model", c, "model", Options{Seq: seq})
	require.NoError(t, err)
	w, err := RandomWeights(g, 5)
	require.NoError(t, err)
	ids := make([]int, seq)
	idf := make([]float64, seq)
	for i := range ids {
		ids[i] = (i*29 + 3) % c.VocabSize
		idf[i] = float64(ids[i])
	}
	feeds := map[string]*ir.Tensor{}
	for k, v := range w {
		feeds[k] = v
	}
	feeds["input_ids"], err = ir.TensorOf(ir.I64, ir.Shape{1, ir.Dim(seq)}, idf...)
	require.NoError(t, err)
	return eval(t, g, feeds).Outputs["logits"], w, ids
}

// TestMoEModelMatchesReference runs each tiny mixture of experts' whole
// model (every layer: gpt-oss's sliding and full ones) past gpt-oss's
// window against the reference.
func TestMoEModelMatchesReference(t *testing.T) {
	for _, name := range moeConfigs {
		t.Run(name, func(t *testing.T) {
			c, err := EmbeddedConfig(name)
			require.NoError(t, err)
			const seq = 9 // past tiny-gpt-oss's window of 4
			got, w, ids := moeModelRun(t, c, seq)
			want, margins := (&moeRef{c: c, w: w, sinkColumns: 1}).forward(ids)
			worst, n := compareRows(got, want, margins, true)
			t.Logf("%s: worst %.3g over %d positions", name, worst, n)
			assert.GreaterOrEqual(t, n, seq-2, "most positions are compared")
			assert.Less(t, worst, f32Tol, "%s: %d positions", name, n)
		})
	}
}

// TestMoEPlantedErrors shows that the comparison sees the errors a
// builder could make: a sink counted twice or not at all, no sliding
// window, no YaRN attention factor, gpt-oss's experts read as Mixtral's
// (gate and up halves, no clamp) or unclamped.
func TestMoEPlantedErrors(t *testing.T) {
	c, err := EmbeddedConfig("tiny-gpt-oss")
	require.NoError(t, err)
	const seq = 6
	got, w, ids := moeModelRun(t, c, seq)
	for _, cols := range []int{0, 2} {
		want, margins := (&moeRef{c: c, w: w, sinkColumns: cols}).forward(ids)
		worst, _ := compareRows(got, want, margins, true)
		t.Logf("%d sink columns: worst %.3g", cols, worst)
		assert.Greater(t, worst, 10*f32Tol, "%d sink columns", cols)
	}
	for _, ref := range []*moeRef{{c: c, w: w, sinkColumns: 1, noWindow: true}, {c: c, w: w, sinkColumns: 1, noYaRNFactor: true}} {
		want, margins := ref.forward(ids)
		worst, _ := compareRows(got, want, margins, true)
		assert.Greater(t, worst, 10*f32Tol, "no window %v, no YaRN factor %v", ref.noWindow, ref.noYaRNFactor)
	}

	for _, plant := range []struct {
		what  string
		g     ir.Gating
		limit float64
	}{{"experts not interleaved", ir.GatingSwiGLU, 0}, {"experts unclamped", ir.GatingClampedSwiGLU, 1e9}} {
		g, err := Build("tiny-gpt-oss:mlp", Options{Seq: 8})
		require.NoError(t, err)
		feeds := mlpFeeds(t, g, 40)
		ok := false
		for _, n := range g.Nodes {
			if n.Op == ir.OpExperts {
				n.Gating, n.Limit, ok = plant.g, plant.limit, true
			}
		}
		require.True(t, ok)
		require.NoError(t, g.Check())
		worst, n := mlpCompare(t, c, g, feeds)
		require.Positive(t, n)
		t.Logf("%s: worst %.3g", plant.what, worst)
		assert.Greater(t, worst, 10*f32Tol, plant.what)
	}
}

// mlpFeeds are the mlp kind's weights and hidden states of std scale: at
// 40, gpt-oss's gate and up values pass its clamp of 7.
func mlpFeeds(t *testing.T, g *ir.Graph, scale float64) map[string]*ir.Tensor {
	t.Helper()
	feeds, err := ir.RandomFeeds(g, 9, ir.Typical)
	require.NoError(t, err)
	w, err := RandomWeights(g, 9)
	require.NoError(t, err)
	for k, v := range w {
		feeds[k] = v
	}
	x := feeds["hidden_states"]
	for i := range x.Len() {
		x.Set(i, x.At(i)*scale)
	}
	return feeds
}

// mlpCompare runs the mlp kind g and compares each row with the
// reference's MoE block of layer 0, leaving out near ties.
func mlpCompare(t *testing.T, c *Config, g *ir.Graph, feeds map[string]*ir.Tensor) (float64, int) {
	t.Helper()
	got := eval(t, g, feeds).Outputs["output"]
	ref := &moeRef{c: c, w: feeds}
	x := feeds["hidden_states"].Float64s()
	H := c.HiddenSize
	rows := len(x) / H
	want := make([][]float64, rows)
	margins := make([]float64, rows)
	for r := range rows {
		want[r], margins[r] = ref.moe(x[r*H:(r+1)*H], 0)
	}
	return compareRows(got, want, margins, false)
}

// TestMoEBlockMatchesReference runs each tiny config's mlp kind, the
// mixture-of-experts block alone, over two sequences of hidden states
// large enough that gpt-oss's clamp cuts, against the reference.
func TestMoEBlockMatchesReference(t *testing.T) {
	for _, name := range moeConfigs {
		t.Run(name, func(t *testing.T) {
			c, err := EmbeddedConfig(name)
			require.NoError(t, err)
			for _, all := range []bool{false, true} {
				cfg := c.clone()
				if all {
					if c.ModelType != Qwen3MoE {
						continue
					}
					cfg.MoE.NormTopKProb = false // softmax over all, kept
				}
				g, err := BuildConfig(name+":mlp", cfg, "mlp", Options{Seq: 8, Batch: 2})
				require.NoError(t, err)
				worst, n := mlpCompare(t, cfg, g, mlpFeeds(t, g, 40))
				t.Logf("%s all %v: worst %.3g over %d rows", name, all, worst, n)
				assert.GreaterOrEqual(t, n, 14, "rows compared of 16")
				assert.Less(t, worst, f32Tol, "%s norm_topk_prob %v", name, !all)
			}
		})
	}
}

// TestYaRN checks the YaRN frequencies and attention factor against the
// reference's, for gpt-oss's own rope_scaling (whose ramp runs between
// dimensions 8.09 and 17.4) and with truncate and given factors.
func TestYaRN(t *testing.T) {
	c, err := EmbeddedConfig("gpt-oss-20b")
	require.NoError(t, err)
	assert.InDelta(t, 0.1*math.Log(32)+1, c.RopeScaling.AttentionFactor, 1e-15)
	for _, edit := range []func(s *RopeScaling){
		func(*RopeScaling) {},
		func(s *RopeScaling) { s.Truncate = true },
		func(s *RopeScaling) { s.BetaFast, s.BetaSlow, s.Factor = 16, 2, 8 },
	} {
		cfg := c.clone()
		edit(cfg.RopeScaling)
		want, _ := invFreqRef(cfg)
		got := yarnInvFreq(cfg.RopeTheta, cfg.HeadDim, cfg.RopeScaling)
		for j := range want {
			assert.InEpsilon(t, want[j], got[j], 1e-7, "frequency %d", j)
		}
	}
	// The parser's defaults: mscale from the factor, or from mscale and
	// mscale_all_dim; an explicit attention_factor wins.
	for _, tt := range []struct {
		rope string
		want float64
	}{
		{`{"rope_type":"yarn","factor":4,"original_max_position_embeddings":16}`, 0.1*math.Log(4) + 1},
		{`{"rope_type":"yarn","factor":4,"original_max_position_embeddings":16,"mscale":2,"mscale_all_dim":1}`, (0.2*math.Log(4) + 1) / (0.1*math.Log(4) + 1)},
		{`{"rope_type":"yarn","factor":4,"original_max_position_embeddings":16,"attention_factor":1.5}`, 1.5},
	} {
		got, err := ParseConfig(withKey(t, smallConfigs[Llama][0], "rope_scaling", tt.rope))
		require.NoError(t, err, tt.rope)
		assert.InDelta(t, tt.want, got.RopeScaling.AttentionFactor, 1e-15, tt.rope)
		assert.True(t, got.RopeScaling.Truncate, "truncate defaults to true")
	}
}
