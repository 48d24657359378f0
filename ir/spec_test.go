package ir

import (
	"context"
	"fmt"
	"github.com/lumsearch/lumsearch/quant"
	"reflect"
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
	require.ElementsMatch(t, []int{0, 1}, orderA, "x and y are arguments; z is unused")
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

// attrsKey remembers prints by encodeAttrs: the print must be %#v's for
// every attribute set, and the encoding must tell apart sets that differ
// in any field (Attrs gaining a field without encodeAttrs learning it
// fails here).
func TestAttrsKeyMatchesPrint(t *testing.T) {
	require.Equal(t, 25, reflect.TypeFor[Attrs]().NumField(), "encodeAttrs must encode every field of Attrs")
	base := Attrs{Name: "x", Data: []float64{1, -0.5}, Ints: []int64{3, -1 << 63}, Axis: 1, To: Shape{2, 3}, Perm: []int{1, 0},
		Starts: []int64{0}, Ends: []int64{4}, Steps: []int64{1}, Before: []int64{1}, After: []int64{2},
		Value: 0.25, DType: BF16, Eps: 1e-5, Scale: 0.125, Causal: true, Offset: 7, Block: 16, Window: 3,
		TopK: 2, Gating: GatingChosen, Limit: 7, Format: quant.FP8, Group: 128, GroupN: 1}
	variants := []Attrs{base, {}}
	v := reflect.ValueOf(&base).Elem()
	for i := range v.NumField() {
		changed := base
		f := reflect.ValueOf(&changed).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("y")
		case reflect.Slice:
			f.Set(reflect.Zero(f.Type())) // nil
			variants = append(variants, changed)
			f.Set(reflect.MakeSlice(f.Type(), 0, 0)) // empty, not nil
		case reflect.Int, reflect.Int64, reflect.Uint8:
			if f.CanInt() {
				f.SetInt(f.Int() + 1)
			} else {
				f.SetUint(f.Uint() + 1)
			}
		case reflect.Float64:
			f.SetFloat(-f.Float())
		case reflect.Bool:
			f.SetBool(!f.Bool())
		default:
			t.Fatalf("field %s of kind %s: teach this test and encodeAttrs", v.Type().Field(i).Name, f.Kind())
		}
		variants = append(variants, changed)
	}
	seen := map[string]string{}
	for _, a := range variants {
		enc := string(encodeAttrs(nil, &a))
		print := fmt.Sprintf("%#v", a)
		if prev, ok := seen[enc]; ok {
			require.Equal(t, prev, print, "two attribute sets share an encoding")
		}
		seen[enc] = print
	}
	require.Len(t, seen, len(variants), "every variant encodes apart")
	for _, op := range []Op{OpSlice, OpPermute, OpReshape, OpConcat, OpConst, OpRMSNorm, OpAttention, OpPagedAttention, OpAdd, OpInput} {
		n := &Node{Op: op, Attrs: base}
		for range 2 { // computed, then remembered
			require.Equal(t, fmt.Sprintf("%#v", op.Normalize(base)), attrsKey(n), "%s", op)
		}
	}
}
