package rules

import (
	"context"
	"testing"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLegal checks each kernel form Legal accepts, and the near misses it
// must reject.
func TestLegal(t *testing.T) {
	rmsNorm := func(b *ir.Builder, x ir.Value) ir.Value {
		ss := b.Sum(b.Mul(x, x), 1)
		return b.Mul(x, b.BroadcastTo(b.Rsqrt(ss), b.Shape(x)))
	}
	softmax := func(b *ir.Builder, s ir.Value) ir.Value {
		m := b.ReduceMax(s, 1)
		e := b.Exp(b.Sub(s, b.BroadcastTo(m, b.Shape(s))))
		return b.Div(e, b.BroadcastTo(b.Sum(e, 1), b.Shape(e)))
	}
	tests := []struct {
		name  string
		build func(b *ir.Builder) ir.Value
		legal bool
		form  string
	}{
		{"elementwise chain", func(b *ir.Builder) ir.Value {
			x := b.Input("x", ir.F32, 8, 16)
			return b.Exp(b.Add(x, b.Neg(x)))
		}, true, "elementwise"},
		{"row kernel", func(b *ir.Builder) ir.Value {
			return rmsNorm(b, b.Input("x", ir.F32, 8, 16))
		}, true, "row"},
		{"matmul with norm prologue and epilogue", func(b *ir.Builder) ir.Value {
			x := b.Input("x", ir.F32, 8, 16)
			w := b.Input("w", ir.F32, 16, 4)
			return b.Add(b.MatMul(rmsNorm(b, x), w), b.Input("r", ir.F32, 8, 4))
		}, true, "matmul, prologue [mul sum rsqrt mul] with a row reduction, epilogue [add]"},
		{"matmul with a rotated epilogue", func(b *ir.Builder) ir.Value {
			y := b.MatMul(b.Input("x", ir.F32, 8, 16), b.Input("w", ir.F32, 16, 8))
			return b.Concat(1, b.Neg(b.Slice(y, 1, 4, 8, 1)), b.Slice(y, 1, 0, 4, 1))
		}, false, ""},
		{"matmul with a transposed epilogue", func(b *ir.Builder) ir.Value {
			y := b.MatMul(b.Input("x", ir.F32, 8, 16), b.Input("w", ir.F32, 16, 8))
			return b.Exp(b.Permute(y, 1, 0))
		}, true, "matmul, epilogue [exp]"},
		{"row reduction after a matmul", func(b *ir.Builder) ir.Value {
			x := b.Input("x", ir.F32, 8, 16)
			return rmsNorm(b, b.MatMul(x, b.Input("w", ir.F32, 16, 16)))
		}, false, ""},
		{"attention", func(b *ir.Builder) ir.Value {
			q := b.Input("q", ir.F32, 8, 4)
			k := b.Input("k", ir.F32, 4, 8)
			v := b.Input("v", ir.F32, 8, 4)
			return b.MatMul(softmax(b, b.MatMul(q, k)), v)
		}, true, "attention"},
		{"two matmuls without a softmax", func(b *ir.Builder) ir.Value {
			x := b.Input("x", ir.F32, 8, 16)
			h := b.Exp(b.MatMul(x, b.Input("w1", ir.F32, 16, 16)))
			return b.MatMul(rmsNorm(b, h), b.Input("w2", ir.F32, 16, 4))
		}, false, ""},
		{"three matmuls", func(b *ir.Builder) ir.Value {
			q := b.Input("q", ir.F32, 8, 4)
			k := b.Input("k", ir.F32, 4, 8)
			v := b.Input("v", ir.F32, 8, 4)
			return b.MatMul(b.MatMul(softmax(b, b.MatMul(q, k)), v), b.Input("o", ir.F32, 4, 4))
		}, false, ""},
		{"one reduction across rows", func(b *ir.Builder) ir.Value {
			return b.Sum(b.Exp(b.Input("x", ir.F32, 32, 16)), 0)
		}, true, "sum"},
		{"two reductions across rows", func(b *ir.Builder) ir.Value {
			x := b.Input("x", ir.F32, 32, 16)
			return b.Add(b.Sum(x, 0), b.Sum(b.Exp(x), 0))
		}, false, ""},
		{"a max across a few rows", func(b *ir.Builder) ir.Value {
			x := b.Input("x", ir.F32, 4, 16)
			return b.Add(b.ReduceMax(x, 0), b.Sum(b.Exp(x), 0))
		}, true, "reduce_max"},
		{"short sums across rows (split-K partials)", func(b *ir.Builder) ir.Value {
			p := b.Input("p", ir.F32, 4, 8, 16)
			q := b.Input("q", ir.F32, 16, 8, 16)
			return b.Add(b.Sum(p, 0), b.Sum(b.Exp(q), 0))
		}, true, "elementwise"},
		{"split-K partials summed in a matmul prologue", func(b *ir.Builder) ir.Value {
			p := b.Input("p", ir.F32, 4, 8, 16)
			return b.MatMul(b.Reshape(b.Sum(p, 0), 8, 16), b.Input("w", ir.F32, 16, 4))
		}, true, "matmul, prologue [sum]"},
		{"split-K partials summed in a matmul epilogue", func(b *ir.Builder) ir.Value {
			p := b.Input("p", ir.F32, 4, 8, 4)
			mm := b.MatMul(b.Input("x", ir.F32, 8, 16), b.Input("w", ir.F32, 16, 4))
			return b.Add(mm, b.Reshape(b.Sum(p, 0), 8, 4))
		}, true, "matmul, epilogue [sum add]"},
		{"split-K partials summed before a norm", func(b *ir.Builder) ir.Value {
			p := b.Input("p", ir.F32, 4, 8, 16)
			return b.RMSNorm(b.Add(b.Input("x", ir.F32, 1, 8, 16), b.Reshape(b.Sum(p, 0), 1, 8, 16)), b.Input("w", ir.F32, 16), 1e-5)
		}, true, "row"},
		{"a sum across rows of a matmul's result", func(b *ir.Builder) ir.Value {
			mm := b.MatMul(b.Input("x", ir.F32, 4, 8, 16), b.Input("w", ir.F32, 4, 16, 4))
			return b.Sum(mm, 0)
		}, false, ""},
		{"a sum across rows of a row kernel's result", func(b *ir.Builder) ir.Value {
			return b.Sum(b.Softmax(b.Input("x", ir.F32, 4, 8, 16), -1), 0)
		}, false, ""},
		{"an integer max along rows (a loop per element, exact)", func(b *ir.Builder) ir.Value {
			return b.ReduceMax(b.Input("x", ir.I32, 8, 16), 1)
		}, true, "reduce_max"},
		{"a softmax across rows", func(b *ir.Builder) ir.Value {
			return b.Softmax(b.Input("x", ir.F16, 8, 16), 0)
		}, true, "softmax"},
		{"a norm broadcast past its rows (the printer's row form refuses it)", func(b *ir.Builder) ir.Value {
			n := b.RMSNorm(b.Input("x", ir.F32, 6, 5), b.Input("w", ir.F32, 5), 1e-6)
			return b.Expand(b.Reshape(n, 1, 6, 5), 4, 6, 5)
		}, false, ""},
		{"a half-precision row reduction in a matmul prologue", func(b *ir.Builder) ir.Value {
			x := b.Input("x", ir.BF16, 8, 16)
			return b.MatMul(b.Mul(x, b.BroadcastTo(b.Sum(x, 1), b.Shape(x))), b.Input("w", ir.BF16, 16, 4))
		}, false, ""},
		{"attention whose probabilities pass a where (no softmax to the printer)", func(b *ir.Builder) ir.Value {
			q, k, v := b.Input("q", ir.F32, 8, 4), b.Input("k", ir.F32, 4, 8), b.Input("v", ir.F32, 8, 4)
			p := softmax(b, b.MatMul(q, k))
			return b.MatMul(b.Where(b.Input("keep", ir.Bool, 8, 8), p, b.BroadcastTo(b.Scalar(ir.F32, 0), ir.Shape{8, 8})), v)
		}, false, ""},
		{"paged attention, its nine arguments", func(b *ir.Builder) ir.Value {
			return pagedAttention(b, b.Input("q", ir.BF16, 4, 2, 8))
		}, true, "paged_attention"},
		{"paged attention with a fused prologue (not printed)", func(b *ir.Builder) ir.Value {
			return pagedAttention(b, b.Neg(b.Input("q", ir.BF16, 4, 2, 8)))
		}, false, ""},
		{"too many arguments", func(b *ir.Builder) ir.Value {
			s := b.Input("x0", ir.F32, 4)
			for i := 1; i <= maxKernelArgs; i++ {
				s = b.Add(s, b.Input("x"+string(rune('0'+i)), ir.F32, 4))
			}
			return s
		}, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := ir.NewBuilder("kernel")
			b.Output("out", tt.build(b))
			body, err := b.Build()
			require.NoError(t, err)
			assert.Equal(t, tt.legal, Legal(body))
			if tt.legal {
				assert.Equal(t, tt.form, FormOf(body).String())
			}
		})
	}
}

// pagedAttention is paged attention of q [4, 2, 8] over fresh inputs: a
// pool of 4 blocks of 4 slots, a table of 2 sequences.
func pagedAttention(b *ir.Builder, q ir.Value) ir.Value {
	kv := func(n string, rows ir.Dim) ir.Value { return b.Input(n, ir.BF16, rows, 1, 8) }
	return b.PagedAttention(q, kv("k", 4), kv("v", 4), kv("kp", 16), kv("vp", 16), b.Input("t", ir.I32, 2, 4),
		b.Input("l", ir.I32, 2), b.Input("s", ir.I32, 3), b.Input("n", ir.I32), 0.5, 4, 0)
}

// TestCorpusKernelBars saturates a Llama 3 8B and a GPT-2 layer with every
// rule set and checks the program extraction picks under the simple
// estimate: at most 8 kernels per run, among them a fused attention kernel,
// a matmul with a fused epilogue and a matmul with a norm prologue.
func TestCorpusKernelBars(t *testing.T) {
	// Parallel: the package's longest tests, independent of each other,
	// share the machine's cores once the sequential tests are done.
	t.Parallel()
	names := []string{"llama-3-8b:layer", "gpt2:block"}
	if testing.Short() {
		names = names[:1] // the long test command checks GPT-2's too
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g, err := corpus.Build(name, corpus.Options{Seq: 16})
			require.NoError(t, err)
			prog, err := Saturate(context.Background(), g, allRewrites(t), SaturateOptions{NodeLimit: 200_000})
			require.NoError(t, err)
			t.Logf("%s: %d e-nodes (%s), %d kernels per run, %d at load", name, prog.EGraph.NumNodes(), prog.Report.Stop, prog.Kernels, prog.Prep)
			require.LessOrEqual(t, prog.Kernels, 8)
			var attention, epilogue, prologue bool
			for _, k := range prog.List {
				attention = attention || k.Form.Kind == "attention"
				epilogue = epilogue || k.Form.Kind == "matmul" && len(k.Form.Epilogue) > 0
				prologue = prologue || k.Form.Kind == "matmul" && k.Form.RowPrologue
			}
			assert.True(t, attention, "a fused attention kernel")
			assert.True(t, epilogue, "a matmul with a fused epilogue")
			assert.True(t, prologue, "a matmul with a norm prologue")
		})
	}
}

// TestLegalMerged: the bodies only lowering's merges build, a
// matrix-vector matmul gathering its epilogue and writing cache rows
// through windows, are LegalMerged and not Legal; a tiled matmul (more
// rows than the matrix-vector kernel takes) gathers nothing either way.
func TestLegalMerged(t *testing.T) {
	gateUp := func(rows ir.Dim) func(b *ir.Builder) {
		return func(b *ir.Builder) {
			x, w := b.Input("$0", ir.F32, rows, 32), b.Input("$1", ir.F32, 32, 64)
			mm := b.MatMul(x, w)
			g := b.Slice(mm, 1, 0, 32, 1)
			b.Output("out0", b.Mul(b.Mul(g, b.Sigmoid(g)), b.Slice(mm, 1, 32, 64, 1)))
		}
	}
	tests := []struct {
		name          string
		build         func(b *ir.Builder)
		legal, merged bool
	}{
		{"gate and up, one row", gateUp(1), false, true},
		{"gate and up, 16 rows", gateUp(16), false, false},
		{"projection writing two cache rows", func(b *ir.Builder) {
			x, w, pos := b.Input("$0", ir.F32, 1, 32), b.Input("$1", ir.F32, 32, 48), b.Input("$2", ir.I32)
			_ = pos
			mm := b.MatMul(x, w)
			b.Output("out0", mm)
			row := func(lo int64) ir.Value { return b.Reshape(b.Slice(mm, 1, lo, lo+16, 1), 1, 1, 16) }
			b.Output("out1 into [1,8,16] at 0 plus $2 along axis 1", row(16))
			b.Output("out2 into [1,8,16] at 0 plus $2 along axis 1", row(32))
		}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := ir.NewBuilder("kernel")
			tt.build(b)
			body, err := b.Build()
			require.NoError(t, err)
			assert.Equal(t, tt.legal, Legal(body))
			assert.Equal(t, tt.merged, LegalMerged(body))
		})
	}
}
