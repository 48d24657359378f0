package cost

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// randomViews builds, over an input of up to four axes, a chain of one to
// four random views: permutes, reshapes (to a random factoring of the
// elements, which the layout may refuse), slices of step 1 and expands of
// a size-1 axis.
func randomViews(rng *rand.Rand) *ir.Graph {
	b := ir.NewBuilder("views")
	dims := []ir.Dim{2, 3, 4, 8, 6, 1}
	shape := ir.Shape{}
	for range 1 + rng.IntN(4) {
		shape = append(shape, dims[rng.IntN(len(dims))])
	}
	v := b.Input("$0", ir.I32, shape...)
	cur := func() ir.Shape { return b.Shape(v) }
	for range 1 + rng.IntN(4) {
		s := cur()
		switch rng.IntN(4) {
		case 0:
			perm := rng.Perm(len(s))
			v = b.Permute(v, perm...)
		case 1:
			n := s.NumElements()
			var to []ir.Dim
			for n > 1 && len(to) < 4 {
				var divs []int64
				for d := int64(2); d <= n; d++ {
					if n%d == 0 {
						divs = append(divs, d)
					}
				}
				d := divs[rng.IntN(len(divs))]
				to = append(to, ir.Dim(d))
				n /= d
			}
			if len(to) == 0 {
				to = []ir.Dim{1}
			}
			to[len(to)-1] *= ir.Dim(n)
			if rng.IntN(3) == 0 {
				to = append([]ir.Dim{1}, to...)
			}
			v = b.Reshape(v, to...)
		case 2:
			ax := rng.IntN(len(s))
			if s[ax] > 1 {
				start := rng.Int64N(int64(s[ax]))
				end := start + 1 + rng.Int64N(int64(s[ax])-start)
				v = b.Slice(v, ax, start, end, 1)
			}
		case 3:
			for ax, d := range s {
				if d == 1 {
					to := append(ir.Shape(nil), s...)
					to[ax] = ir.Dim(2 + rng.IntN(3))
					v = b.Expand(v, to...)
					break
				}
			}
		}
	}
	b.Output("out0", v)
	g, err := b.Build()
	if err != nil {
		panic(err)
	}
	return g
}

// TestViewLayoutAddressesWhatTheViewsRead: on random chains of views over
// an input holding each element's own linear index, wherever ViewLayout
// gives a layout, the layout's address of every output element is the
// value the reference interpreter reads there.
func TestViewLayoutAddressesWhatTheViewsRead(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 3))
	laid, tried := 0, 0
	// First, a slice of an axis of two modes (a reshape keeps the modes
	// of the axes it merges): it moves the offset by whole inner blocks.
	fixed := body(t, func(b *ir.Builder) ir.Value {
		return b.Slice(b.Reshape(b.Permute(b.Input("$0", ir.I32, 4, 2, 3), 1, 2, 0), 6, 4), 0, 3, 6, 1)
	})
	for seed := range 401 {
		g := fixed
		if seed > 0 {
			g = randomViews(rng)
		}
		tried++
		out := g.Outputs[0].Value
		buf, l, ok := ViewLayout(g, out)
		if !ok {
			continue
		}
		laid++
		in := g.Node(buf)
		x := ir.NewTensor(ir.I32, in.Shape)
		for i := range x.Len() {
			x.SetInt(i, i)
		}
		res, err := ir.Eval(context.Background(), g, map[string]*ir.Tensor{in.Name: x}, ir.EvalOptions{})
		require.NoError(t, err, "seed %d", seed)
		got := res.Outputs[g.Outputs[0].Name]
		shape := g.Node(out).Shape
		require.Len(t, l.Axes, len(shape), "seed %d", seed)
		for d, modes := range l.Axes {
			require.Equal(t, int64(shape[d]), axisSize(modes), "seed %d: axis %d", seed, d)
		}
		for i := range got.Len() {
			addr, rest := l.Offset, i
			for d := len(shape) - 1; d >= 0; d-- {
				c := rest % int64(shape[d])
				rest /= int64(shape[d])
				for m := len(l.Axes[d]) - 1; m >= 0; m-- {
					md := l.Axes[d][m]
					addr += c % md.Size * md.Stride
					c /= md.Size
				}
			}
			require.Equal(t, float64(addr), got.At(i), "seed %d: %s, element %d", seed, g, i)
		}
	}
	t.Logf("%d of %d chains laid out", laid, tried)
	assert.Greater(t, laid, tried/2)
}

// TestStridedOperand: merged attention heads and an aligned K slice are
// read in 16-byte runs; an unaligned slice, a K run split below 8 values
// and a computed operand are not.
func TestStridedOperand(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(b *ir.Builder) ir.Value
		right bool
		want  bool
	}{
		{"merged heads", func(b *ir.Builder) ir.Value {
			return b.Reshape(b.Permute(b.Input("$0", ir.BF16, 1, 32, 512, 128), 0, 2, 1, 3), 512, 4096)
		}, false, true},
		{"aligned slice", func(b *ir.Builder) ir.Value { return b.Slice(b.Input("$0", ir.F16, 40, 96), 1, 32, 96, 1) }, false, true},
		{"unaligned slice", func(b *ir.Builder) ir.Value { return b.Slice(b.Input("$0", ir.F16, 40, 96), 1, 4, 68, 1) }, false, false},
		{"heads of 4", func(b *ir.Builder) ir.Value {
			return b.Reshape(b.Permute(b.Input("$0", ir.BF16, 1, 16, 64, 4), 0, 2, 1, 3), 64, 64)
		}, false, false},
		{"computed", func(b *ir.Builder) ir.Value { return b.Neg(b.Input("$0", ir.BF16, 64, 64)) }, false, false},
		{"transposed weight split", func(b *ir.Builder) ir.Value {
			return b.Reshape(b.Permute(b.Reshape(b.Input("$0", ir.BF16, 24, 64), 24, 4, 16), 1, 2, 0), 64, 24)
		}, true, true},
		{"row-major right", func(b *ir.Builder) ir.Value { return b.Input("$0", ir.BF16, 64, 24) }, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := body(t, tc.build)
			v := g.Outputs[0].Value
			s := g.Node(v).Shape
			K := int64(s[len(s)-1])
			if tc.right {
				K = int64(s[len(s)-2])
			}
			_, ok := StridedOperand(g, v, g.Node(v).DType, K, tc.right)
			assert.Equal(t, tc.want, ok)
		})
	}
}
