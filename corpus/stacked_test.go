package corpus

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/safetensors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseStacked(t *testing.T) {
	s, ok := ParseStacked("model.layers.3.mlp.experts.*.gate_proj+up_proj.weight")
	require.True(t, ok)
	assert.Equal(t, []string{"model.layers.3.mlp.experts.7.gate_proj.weight", "model.layers.3.mlp.experts.7.up_proj.weight"}, s.Names(7))
	s, ok = ParseStacked("model.layers.0.block_sparse_moe.experts.*.w2.weight")
	require.True(t, ok)
	assert.Equal(t, []string{"model.layers.0.block_sparse_moe.experts.12.w2.weight"}, s.Names(12))
	for _, name := range []string{"model.layers.0.mlp.gate_proj.weight", "a.*.b.*.c", "a.*.", "a.*.x"} {
		_, ok := ParseStacked(name)
		assert.False(t, ok, name)
	}
}

// TestStackedWeightsFromACheckpoint: a Mixtral or Qwen3-MoE checkpoint's
// per-expert tensors load as the graph's stacked weights, each expert's
// gate and up projections transposed side by side and its down projection
// transposed, in the weight's dtype; a missing or misshapen expert tensor
// is an error naming it.
func TestStackedWeightsFromACheckpoint(t *testing.T) {
	for _, c := range []struct {
		model          string
		expert         string
		gate, up, down string
	}{
		{"tiny-mixtral", "model.layers.%d.block_sparse_moe.experts.%d.", "w1", "w3", "w2"},
		{"tiny-qwen3-moe", "model.layers.%d.mlp.experts.%d.", "gate_proj", "up_proj", "down_proj"},
	} {
		t.Run(c.model, func(t *testing.T) {
			cfg, err := EmbeddedConfig(c.model)
			require.NoError(t, err)
			g, err := Build(c.model+":model", Options{Seq: 4, Batch: 1, DType: ir.BF16})
			require.NoError(t, err)
			E, H, I := cfg.MoE.NumExperts, cfg.HiddenSize, cfg.MoE.IntermediateSize
			// Every weight the graph names directly, and each expert's
			// tensors, random.
			rng := rand.New(rand.NewPCG(3, 4))
			ckpt := map[string]*ir.Tensor{}
			rnd := func(shape ...ir.Dim) *ir.Tensor {
				vals := make([]float32, ir.Shape(shape).NumElements())
				for i := range vals {
					vals[i] = float32(rng.NormFloat64())
				}
				tt, err := ir.TensorOfFloat32(ir.BF16, ir.Shape(shape), vals)
				require.NoError(t, err)
				return tt
			}
			for _, v := range g.Weights() {
				if n := g.Node(v); !isStacked(n.Name) {
					ckpt[n.Name] = rnd(n.Shape...)
				}
			}
			for l := range cfg.NumHiddenLayers {
				for e := range E {
					pre := fmtExpert(c.expert, l, e)
					ckpt[pre+c.gate+".weight"] = rnd(ir.Dim(I), ir.Dim(H))
					ckpt[pre+c.up+".weight"] = rnd(ir.Dim(I), ir.Dim(H))
					ckpt[pre+c.down+".weight"] = rnd(ir.Dim(H), ir.Dim(I))
				}
			}
			dir := t.TempDir()
			require.NoError(t, safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), ckpt, nil))
			w, set, err := SafetensorsWeights(g, dir)
			require.NoError(t, err)
			defer set.Close()
			stacked := 0
			for _, v := range g.Weights() {
				n := g.Node(v)
				if !isStacked(n.Name) {
					continue
				}
				stacked++
				got := w[n.Name]
				require.NotNil(t, got, n.Name)
				var l int
				_, err := fmtScan(n.Name, &l)
				require.NoError(t, err)
				for e := range E {
					pre := fmtExpert(c.expert, l, e)
					if strings.Contains(n.Name, "+") {
						gate, up := ckpt[pre+c.gate+".weight"], ckpt[pre+c.up+".weight"]
						for k := range H {
							for o := range I {
								require.Equal(t, gate.At(int64(o*H+k)), got.At(int64((e*H+k)*2*I+o)))
								require.Equal(t, up.At(int64(o*H+k)), got.At(int64((e*H+k)*2*I+I+o)))
							}
						}
					} else {
						down := ckpt[pre+c.down+".weight"]
						for k := range I {
							for o := range H {
								require.Equal(t, down.At(int64(o*I+k)), got.At(int64((e*I+k)*H+o)))
							}
						}
					}
				}
			}
			assert.Equal(t, 2*cfg.NumHiddenLayers, stacked, "gate-up and down a layer")

			missing := fmtExpert(c.expert, 0, E-1) + c.up + ".weight"
			delete(ckpt, missing)
			bad := t.TempDir()
			require.NoError(t, safetensors.WriteFile(filepath.Join(bad, "model.safetensors"), ckpt, nil))
			_, _, err = SafetensorsWeights(g, bad)
			require.ErrorContains(t, err, missing+": missing")
		})
	}
}

func isStacked(name string) bool { _, ok := ParseStacked(name); return ok }

// fmtExpert fills a per-expert prefix format with a layer and an expert.
func fmtExpert(format string, layer, expert int) string { return fmt.Sprintf(format, layer, expert) }

// fmtScan reads a stacked weight's layer.
func fmtScan(name string, layer *int) (int, error) {
	return fmt.Sscanf(name, "model.layers.%d.", layer)
}
