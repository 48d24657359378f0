package search

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/ir"
)

// TestCompilePagedStep compiles a small serving step (a norm, the q, k
// and v projections of its tokens, paged attention over a pool, the
// output projection and the residual) with every rule set, and verifies
// it: the paged attention kernel is one of its launches, and every
// distinct kernel and the whole program agree with the reference under
// the emulation on random valid metadata. (The projections' matrices are
// inputs: a graph built here has no weights of its own to load.)
func TestCompilePagedStep(t *testing.T) {
	b := ir.NewBuilder("paged_step")
	const T, E, Hq, Hkv, D = 9, 64, 4, 2, 16
	x := b.Input("x", ir.BF16, T, E)
	n := b.RMSNorm(x, b.Input("g", ir.BF16, E), 1e-6)
	proj := func(name string, heads ir.Dim) ir.Value {
		return b.Reshape(b.MatMul(n, b.Input(name, ir.BF16, E, heads*D)), T, heads, D)
	}
	pool := func(name string) ir.Value { return b.Input(name, ir.BF16, 64, Hkv, D) }
	att := b.PagedAttention(proj("wq", Hq), proj("wk", Hkv), proj("wv", Hkv), pool("kpool"), pool("vpool"),
		b.Input("table", ir.I32, 3, 6), b.Input("lens", ir.I32, 3), b.Input("starts", ir.I32, 4), b.Input("seqs", ir.I32), 1/math.Sqrt(D), 4, 0)
	b.Output("y", b.Add(x, b.MatMul(b.Reshape(att, T, Hq*D), b.Input("wo", ir.BF16, Hq*D, E))))
	g, err := b.Build()
	require.NoError(t, err)
	res, err := Compile(context.Background(), &Model{Name: "paged_step", Graph: g}, Options{})
	require.NoError(t, err)
	assert.Contains(t, res.Verified, "the whole program matches the reference")
	paged := 0
	for _, l := range res.Plan.Run {
		if l.Form == "paged_attention" {
			paged++
		}
	}
	assert.Equal(t, 1, paged, "one paged attention launch")
}
