package ir

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pagedGraph is a paged attention graph of T tokens over a pool of P
// slots, blocks of block, a table of S rows and M columns.
func pagedGraph(t *testing.T, T, P, S, M Dim, block int64, meta DType) *Graph {
	t.Helper()
	b := NewBuilder("paged")
	q, k, v := b.Input("q", F32, T, 2, 4), b.Input("k", F32, T, 1, 4), b.Input("v", F32, T, 1, 4)
	kp, vp := b.Input("kpool", F32, P, 1, 4), b.Input("vpool", F32, P, 1, 4)
	b.Output("out", b.PagedAttention(q, k, v, kp, vp, b.Input("table", meta, S, M), b.Input("lens", meta, S),
		b.Input("starts", meta, S+1), b.Input("seqs", meta), 0.5, block, 0))
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

// TestRandomFeedsDrawValidPagedMetadata: over many seeds and shapes, the
// random feeds of a paged attention graph are metadata the op accepts
// (the reference evaluates them), and the draws cover what the kernels
// must handle: decode tokens and chunks, sequences without tokens,
// tokens of no sequence, empty contexts, contexts of whole blocks and
// others, and table entries no position needs (-1).
func TestRandomFeedsDrawValidPagedMetadata(t *testing.T) {
	var decode, chunk, noTokens, tail, empty, whole, partial, unused int
	shapes := []struct {
		T, P, S, M Dim
		block      int64
	}{{1, 16, 1, 4, 4}, {9, 64, 3, 5, 4}, {17, 48, 5, 2, 8}, {4, 8, 6, 2, 2}, {30, 512, 2, 40, 16}}
	for i, sh := range shapes {
		for _, meta := range []DType{I32, I64} {
			g := pagedGraph(t, sh.T, sh.P, sh.S, sh.M, sh.block, meta)
			for seed := range uint64(40) {
				feeds, err := RandomFeeds(g, seed+uint64(100*i), Typical)
				require.NoError(t, err)
				_, err = Eval(context.Background(), g, feeds, EvalOptions{})
				require.NoError(t, err, "shape %d seed %d", i, seed)
				n := feeds["seqs"].Int(0)
				starts, lens := feeds["starts"], feeds["lens"]
				for s := range n {
					q := starts.Int(s+1) - starts.Int(s)
					ctx := lens.Int(s) - q
					switch {
					case q == 0:
						noTokens++
					case q == 1:
						decode++
					default:
						chunk++
					}
					switch {
					case ctx == 0:
						empty++
					case ctx%sh.block == 0:
						whole++
					default:
						partial++
					}
				}
				if starts.Int(n) < int64(sh.T) {
					tail++
				}
				for j := range feeds["table"].Len() {
					if feeds["table"].Int(j) == -1 {
						unused++
						break
					}
				}
			}
		}
	}
	for name, count := range map[string]int{"decode": decode, "chunk": chunk, "no tokens": noTokens, "tail": tail, "empty": empty, "whole": whole, "partial": partial, "unused": unused} {
		assert.Positive(t, count, "no draw has %s", name)
	}
}

// TestDrawPagedRefusesNoPool: a pool that is not whole blocks (or a
// negative extent) has no valid draw, and says so.
func TestDrawPagedRefusesNoPool(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range [][5]int64{{4, 10, 4, 1, 1}, {4, 2, 4, 1, 1}, {4, 8, 0, 1, 1}, {-1, 8, 4, 1, 1}} {
		_, err := DrawPaged(rng, c[0], c[1], c[2], c[3], c[4])
		assert.Error(t, err, "%v", c)
	}
	d, err := DrawPaged(rng, 3, 8, 4, 0, 2)
	require.NoError(t, err)
	assert.Equal(t, int64(0), d.Present)
}
