package ir

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCanonical(t *testing.T) {
	build := func(swap bool, dup bool) *Graph {
		b := NewBuilder("k")
		x := b.Input("x", F32, 2, 3)
		y := b.Input("y", F32, 2, 3)
		unused := b.Input("z", F32, 1)
		_ = unused
		e := b.Exp(y)
		var s Value
		if swap {
			s = b.Mul(x, e)
		} else {
			s = b.Mul(e, x)
		}
		if dup {
			s = b.Add(s, b.Mul(e, x))
		} else {
			s = b.Add(s, s)
		}
		b.Output("o", s)
		g, err := b.Build()
		require.NoError(t, err)
		return g
	}
	a, orderA, err := Canonical(build(false, false))
	require.NoError(t, err)
	c, orderC, err := Canonical(build(true, true))
	require.NoError(t, err)
	require.Equal(t, a.String(), c.String(), "commuted and duplicated forms are one body")
	require.Equal(t, orderA, orderC)
	require.Equal(t, []int{0, 1}, orderA, "an argument sorts before exp(y), so x becomes $0; z is unused")
	require.Len(t, a.Inputs(), 2)

	// The canonical body computes what the original does.
	orig := build(true, true)
	x := mustTensor(t, F32, Shape{2, 3}, 1, 2, 3, 4, 5, 6)
	y := mustTensor(t, F32, Shape{2, 3}, 0.5, 0.25, 0, -1, 1, 2)
	z := mustTensor(t, F32, Shape{1}, 7)
	want, err := EvalKernel(context.Background(), orig, x, y, z)
	require.NoError(t, err)
	args := []*Tensor{x, y, z}
	got, err := EvalKernel(context.Background(), a, args[orderA[0]], args[orderA[1]])
	require.NoError(t, err)
	require.Equal(t, want[0].F64, got[0].F64)
}
