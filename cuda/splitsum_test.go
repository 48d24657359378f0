package cuda

import (
	"testing"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/rules"
	"github.com/stretchr/testify/require"
)

// splitSumBodies are test kernels of every form that read split-K partials
// and sum them as they load them (a short sum across rows,
// rules.MaxCrossSum): rotary embedding through a concat's guarded
// branches, a residual norm, f32 and tensor-core matmul prologues and
// epilogues, and attention's q, k and v.
func splitSumBodies(t testing.TB) map[string]*ir.Graph {
	t.Helper()
	build := func(f func(b *ir.Builder) ir.Value) *ir.Graph {
		b := ir.NewBuilder("kernel")
		b.Output("out0", f(b))
		g, err := b.Build()
		require.NoError(t, err)
		return g
	}
	// sum reads split partials of a value of the given shape.
	sum := func(b *ir.Builder, name string, dt ir.DType, split ir.Dim, shape ...ir.Dim) ir.Value {
		return b.Reshape(b.Sum(b.Input(name, dt, append(ir.Shape{split}, shape...)...), 0), shape...)
	}
	bodies := map[string]*ir.Graph{
		"splitk_rotary": build(func(b *ir.Builder) ir.Value {
			x := sum(b, "$0", ir.F32, 4, 5, 16)
			cos, sin := b.Input("$1", ir.F32, 5, 16), b.Input("$2", ir.F32, 5, 16)
			half := b.Concat(1, b.Neg(b.Slice(x, 1, 8, 16, 1)), b.Slice(x, 1, 0, 8, 1))
			return b.Add(b.Mul(x, cos), b.Mul(half, sin))
		}),
		"splitk_residual_rms_norm": build(func(b *ir.Builder) ir.Value {
			h := b.Add(b.Input("$0", ir.F32, 1, 5, 40), b.Reshape(sum(b, "$1", ir.F32, 3, 5, 40), 1, 5, 40))
			return b.RMSNorm(h, b.Input("$2", ir.F32, 40), 1e-5)
		}),
		"splitk_two_partials": build(func(b *ir.Builder) ir.Value {
			return b.Add(b.Add(b.Input("$0", ir.F32, 7, 9), sum(b, "$1", ir.F32, 4, 7, 9)), sum(b, "$2", ir.F32, 16, 7, 9))
		}),
		"splitk_mm_f32": build(func(b *ir.Builder) ir.Value {
			a := b.Mul(sum(b, "$0", ir.F32, 4, 5, 33), b.Input("$1", ir.F32, 5, 33))
			y := b.MatMul(a, b.Input("$2", ir.F32, 33, 40))
			return b.Add(y, sum(b, "$3", ir.F32, 2, 5, 40))
		}),
	}
	for _, dt := range []ir.DType{ir.BF16, ir.F16} {
		bodies["splitk_mm_"+dt.String()] = build(func(b *ir.Builder) ir.Value {
			a := sum(b, "$0", dt, 4, 20, 48)
			y := b.MatMul(a, b.Input("$1", dt, 48, 40))
			return b.Add(y, sum(b, "$2", dt, 8, 20, 40))
		})
	}
	bodies["splitk_attention_prefill"] = attentionBodySplit(t, ir.F32, 5, 5, 4)
	bodies["splitk_attention_decode"] = attentionBodySplit(t, ir.F32, 1, 70, 8)
	bodies["splitk_attention_bf16"] = attentionBodySplit(t, ir.BF16, 5, 37, 2)
	return bodies
}

// TestSplitSumBodiesAreLegal: the split-K test kernels are bodies the
// e-graph may hold (rules.Legal), so the schedule tests cover what fusion
// builds.
func TestSplitSumBodiesAreLegal(t *testing.T) {
	for name, body := range splitSumBodies(t) {
		require.True(t, rules.Legal(body), name)
	}
}
