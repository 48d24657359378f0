package corpus

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
	"github.com/lumsearch/lumsearch/safetensors"
)

// checkpointOf is the checkpoint a quantized graph's weights ws come
// from, as the format's tools write it: fp8 codes recorded as F8_E4M3,
// stacked expert tensors split into each expert's parts, per-tensor fp8
// scales stored as scalars, and gptq's trivial g_idx beside its words.
func checkpointOf(t *testing.T, g *ir.Graph, ws map[string]*ir.Tensor) (map[string]*ir.Tensor, map[string]string) {
	t.Helper()
	out, dtypes := map[string]*ir.Tensor{}, map[string]string{}
	roles := packedRoles(g)
	put := func(name string, tt *ir.Tensor, r packedRole, packed bool) {
		if packed && r.dq.Format == quant.FP8 && r.operand == 0 {
			dtypes[name] = "F8_E4M3"
		}
		if packed && r.dq.Format == quant.FP8 && r.operand == 1 && tt.Len() == 1 {
			tt = &ir.Tensor{DType: tt.DType, Shape: ir.Shape{}, F32: tt.F32, F64: tt.F64}
		}
		out[name] = tt
	}
	for _, v := range g.Weights() {
		n := g.Node(v)
		r, packed := roles[v]
		st, stacked := ParseStacked(n.Name)
		if !stacked {
			put(n.Name, ws[n.Name], r, packed)
			continue
		}
		require.True(t, packed, "float stacked weights are stacked_test's")
		part := n.Shape[1:].Clone()
		axis := r.stackAxis(len(part))
		parts := len(st.parts)
		part[axis] /= ir.Dim(parts)
		outer, inner, ext := part[:axis].NumElements(), part[axis+1:].NumElements(), int64(part[axis])
		for e := range int(n.Shape[0]) {
			for p, name := range st.Names(e) {
				tt := ir.NewTensor(n.DType, part)
				for o := range outer {
					for x := range ext {
						for i := range inner {
							j := int64(e)*outer*ext*int64(parts)*inner + (o*ext*int64(parts)+int64(p)*ext+x)*inner + i
							if n.DType.IsFloat() {
								tt.Set((o*ext+x)*inner+i, ws[n.Name].At(j))
							} else {
								tt.SetInt((o*ext+x)*inner+i, ws[n.Name].Int(j))
							}
						}
					}
				}
				put(name, tt, r, true)
			}
		}
	}
	for _, p := range packedWeights(g) {
		if p.node.Format != quant.GPTQ {
			continue
		}
		K := p.node.Shape[len(p.node.Shape)-2]
		idx := make([]int64, K)
		for k := range idx {
			idx[k] = int64(k) / p.node.Group
		}
		gi, err := ir.TensorOfInts(ir.I32, ir.Shape{K}, idx...)
		require.NoError(t, err)
		base := g.Node(p.leaves[0]).Name
		base = base[:len(base)-len(".qweight")] + ".g_idx"
		if st, ok := ParseStacked(base); ok {
			for e := range int(p.node.Shape[0]) {
				for _, name := range st.Names(e) {
					out[name] = gi
				}
			}
		} else {
			out[base] = gi
		}
	}
	return out, dtypes
}

// writeCheckpoint writes tensors as dir/model.safetensors.
func writeCheckpoint(t *testing.T, dir string, tensors map[string]*ir.Tensor, dtypes map[string]string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "model.safetensors"))
	require.NoError(t, err)
	require.NoError(t, safetensors.WriteWith(f, tensors, nil, safetensors.WriteOptions{DTypes: dtypes}))
	require.NoError(t, f.Close())
}

// TestQuantizedCheckpointsRoundTrip writes small checkpoints of every
// format (tiny-llama-like, tiny-gpt-oss with MXFP4 experts, Mixtral and
// Qwen3-MoE with each expert's tensors) and loads them: every leaf as it
// was written, and the loaded model computes what it computed.
func TestQuantizedCheckpointsRoundTrip(t *testing.T) {
	for _, name := range []string{"llama mxfp4", "llama fp8 per channel", "llama awq", "llama gptq", "llama fp8 blocks", "llama fp8 per tensor",
		"gpt-oss layer mxfp4", "gpt-oss decode mxfp4", "mixtral fp8 blocks", "mixtral mxfp4", "qwen3 gptq", "qwen3 awq"} {
		t.Run(name, func(t *testing.T) {
			qc := quantCaseNamed(t, name)
			g, _ := qc.build(t, Options{Seq: 2})
			ws, err := RandomWeights(g, 5)
			require.NoError(t, err)
			ckpt, dtypes := checkpointOf(t, g, ws)
			dir := t.TempDir()
			writeCheckpoint(t, dir, ckpt, dtypes)
			got, set, err := SafetensorsWeights(g, dir)
			require.NoError(t, err)
			defer set.Close()
			require.Len(t, got, len(ws))
			for n, want := range ws {
				require.Contains(t, got, n)
				require.Equal(t, want.DType, got[n].DType, n)
				require.Equal(t, want.Shape, got[n].Shape, n)
				for i := range want.Len() {
					require.Equal(t, want.At(i), got[n].At(i), "%s[%d]", n, i)
				}
			}
		})
	}
}

func quantCaseNamed(t *testing.T, name string) quantCase {
	t.Helper()
	for _, qc := range quantCases {
		if qc.name == name {
			return qc
		}
	}
	require.Failf(t, "no case", "%s", name)
	return quantCase{}
}

// TestQuantizedCheckpointRefusals: a tensor whose dtype, shape or scale
// count disagrees with the config, a missing expert, and an act-order
// g_idx are refused, naming the tensor.
func TestQuantizedCheckpointRefusals(t *testing.T) {
	tests := []struct {
		cse  string
		edit func(t *testing.T, ckpt map[string]*ir.Tensor, dtypes map[string]string)
		want string
	}{
		{"llama awq", func(t *testing.T, ckpt map[string]*ir.Tensor, dtypes map[string]string) {
			s := bf16Scales(t, ckpt, "model.layers.0.self_attn.q_proj.scales")
			s.Set(3, 1e5) // past f16's largest, 65504
		}, "model.layers.0.self_attn.q_proj.scales: element 3 is 99840 in the checkpoint's BF16, which f16 does not hold exactly (+Inf): awq scales are read as f16"},
		{"llama gptq", func(t *testing.T, ckpt map[string]*ir.Tensor, dtypes map[string]string) {
			s := bf16Scales(t, ckpt, "model.layers.0.mlp.down_proj.scales")
			s.Set(0, 0x1.02p-20) // bf16's last bit at 2^-20 is below f16's subnormal step, 2^-24
		}, "model.layers.0.mlp.down_proj.scales: element 0 is 9.611249e-07 in the checkpoint's BF16, which f16 does not hold exactly"},
		{"llama fp8 per channel", func(t *testing.T, ckpt map[string]*ir.Tensor, dtypes map[string]string) {
			delete(dtypes, "model.layers.0.self_attn.q_proj.weight") // plain U8 bytes
		}, "model.layers.0.self_attn.q_proj.weight: dtype U8, want F8_E4M3 (fp8 codes)"},
		{"llama fp8 per channel", func(t *testing.T, ckpt map[string]*ir.Tensor, dtypes map[string]string) {
			ckpt["model.layers.0.mlp.up_proj.weight_scale"] = mustTensor(t, ir.F32, ir.Shape{1}, 0.5) // per tensor, not per channel
		}, "model.layers.0.mlp.up_proj.weight_scale: shape [1], want [128 1] (fp8 scales)"},
		{"llama fp8 blocks", func(t *testing.T, ckpt map[string]*ir.Tensor, dtypes map[string]string) {
			ckpt["model.layers.0.mlp.down_proj.weight_scale"] = mustTensor(t, ir.F32, ir.Shape{4, 8}, 0.5)
		}, "model.layers.0.mlp.down_proj.weight_scale: shape [4 8], want [4 4] (fp8 scales)"},
		{"llama awq", func(t *testing.T, ckpt map[string]*ir.Tensor, dtypes map[string]string) {
			w := ckpt["model.layers.0.self_attn.o_proj.qzeros"]
			ckpt["model.layers.0.self_attn.o_proj.qzeros"] = mustTensor(t, ir.F32, w.Shape, 1)
		}, "model.layers.0.self_attn.o_proj.qzeros: dtype F32, want I32 (awq zero points)"},
		{"llama gptq", func(t *testing.T, ckpt map[string]*ir.Tensor, dtypes map[string]string) {
			gi := ckpt["model.layers.0.mlp.gate_proj.g_idx"]
			swapped, err := ir.TensorOfInts(ir.I32, gi.Shape, 1)
			require.NoError(t, err)
			ckpt["model.layers.0.mlp.gate_proj.g_idx"] = swapped
		}, "model.layers.0.mlp.gate_proj.g_idx: input 0 is in group 1, not 0: act-order (desc_act) weights are not supported"},
		{"gpt-oss layer mxfp4", func(t *testing.T, ckpt map[string]*ir.Tensor, dtypes map[string]string) {
			delete(ckpt, "model.layers.0.mlp.experts.down_proj_scales")
		}, "model.layers.0.mlp.experts.down_proj_scales: missing"},
		{"gpt-oss layer mxfp4", func(t *testing.T, ckpt map[string]*ir.Tensor, dtypes map[string]string) {
			b := ckpt["model.layers.0.mlp.experts.gate_up_proj_blocks"]
			ckpt["model.layers.0.mlp.experts.gate_up_proj_blocks"] = &ir.Tensor{DType: ir.U8, Shape: ir.Shape{4, 64, 32}, U8: b.U8}
		}, "model.layers.0.mlp.experts.gate_up_proj_blocks: shape [4 64 32], want [4 64 2 16] (mxfp4 codes)"},
		{"qwen3 gptq", func(t *testing.T, ckpt map[string]*ir.Tensor, dtypes map[string]string) {
			delete(ckpt, "model.layers.0.mlp.experts.7.up_proj.scales")
		}, "stacked weight model.layers.0.mlp.experts.*.gate_proj+up_proj.scales: model.layers.0.mlp.experts.7.up_proj.scales: missing"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			qc := quantCaseNamed(t, tt.cse)
			g, _ := qc.build(t, Options{Seq: 2})
			ws, err := RandomWeights(g, 5)
			require.NoError(t, err)
			ckpt, dtypes := checkpointOf(t, g, ws)
			tt.edit(t, ckpt, dtypes)
			dir := t.TempDir()
			writeCheckpoint(t, dir, ckpt, dtypes)
			_, _, err = SafetensorsWeights(g, dir)
			require.Error(t, err)
			assert.ErrorContains(t, err, tt.want)
		})
	}
}

func mustTensor(t *testing.T, dt ir.DType, s ir.Shape, v float64) *ir.Tensor {
	t.Helper()
	tt, err := ir.TensorOf(dt, s, v)
	require.NoError(t, err)
	return tt
}

// bf16Scales replaces the checkpoint's f16 scales of name with the same
// values in bf16 (exact: f16 scales of these sizes need no more than
// bf16's bits after rounding), as a bf16 model's quantizer writes them,
// and returns them.
func bf16Scales(t *testing.T, ckpt map[string]*ir.Tensor, name string) *ir.Tensor {
	t.Helper()
	f := ckpt[name]
	require.NotNil(t, f, name)
	b := ir.NewTensor(ir.BF16, f.Shape)
	for i := range f.Len() {
		b.Set(i, f.At(i))
	}
	ckpt[name] = b
	return b
}

// A bf16 checkpoint's scales load as the f16 the kernels read when f16
// holds every one exactly.
func TestBF16ScalesLoadExactly(t *testing.T) {
	for _, name := range []string{"llama awq", "llama gptq"} {
		t.Run(name, func(t *testing.T) {
			qc := quantCaseNamed(t, name)
			g, _ := qc.build(t, Options{Seq: 2})
			ws, err := RandomWeights(g, 5)
			require.NoError(t, err)
			ckpt, dtypes := checkpointOf(t, g, ws)
			const scales = "model.layers.0.self_attn.k_proj.scales"
			b := bf16Scales(t, ckpt, scales)
			dir := t.TempDir()
			writeCheckpoint(t, dir, ckpt, dtypes)
			got, _, err := SafetensorsWeights(g, dir)
			require.NoError(t, err)
			require.Equal(t, ir.F16, got[scales].DType)
			for i := range b.Len() {
				require.Equal(t, b.At(i), got[scales].At(i), "%s[%d]", scales, i)
			}
		})
	}
}
