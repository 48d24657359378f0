package ir

import (
	"context"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/x448/float16"
)

func TestDTypeRound(t *testing.T) {
	for _, tc := range []struct {
		dt   DType
		in   float64
		want float64
	}{
		{F32, 1 + 0x1p-30, 1},
		{F32, 1 + 0x1p-24 + 0x1p-40, 1 + 0x1p-23}, // above the tie: up
		{F16, 1 + 0x1p-11, 1},                     // tie: to even
		{F16, 1 + 3*0x1p-11, 1 + 0x1p-9},          // tie: to even, up
		{F16, 70000, math.Inf(1)},
		{F16, 0x1p-25, 0},     // half the smallest subnormal: to even (0)
		{BF16, 1 + 0x1p-8, 1}, // tie: to even
		{BF16, 1 + 0x1p-7, 1 + 0x1p-7},
		{BF16, 1 + 3*0x1p-8, 1 + 0x1p-6},
		{BF16, -3.4e38, math.Inf(-1)},
		{BF16, -3.3e38, -3.2964854295465914e+38}, // below the largest bf16: finite
		{I32, 2.9, 2},
		{I32, -2.9, -2},
		{I32, 1 << 31, -(1 << 31)}, // wraps
		{I64, -7.5, -7},
		{Bool, 0.1, 1},
		{Bool, 0, 0},
	} {
		require.Equal(t, tc.want, tc.dt.Round(tc.in), "%s.Round(%v)", tc.dt, tc.in)
	}
	require.True(t, math.IsNaN(BF16.Round(math.NaN())))
	// f16 through float32 agrees with the library's own conversion.
	for _, x := range []float32{0.1, 3.14159, 65504, 1e-6, -2.5e-5} {
		require.Equal(t, float64(float16.Fromfloat32(x).Float32()), F16.Round(float64(x)))
	}
}

func TestDTypeNames(t *testing.T) {
	for _, dt := range []DType{F32, F16, BF16, I32, I64, Bool} {
		got, err := ParseDType(dt.String())
		require.NoError(t, err)
		require.Equal(t, dt, got)
	}
	_, err := ParseDType("f8")
	require.ErrorContains(t, err, `unknown dtype "f8"`)
}

func TestBuilderErrorsNameOpAndShapes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(b *Builder)
		want  string
	}{
		{"matmul inner", func(b *Builder) {
			b.MatMul(b.Input("x", F32, 2, 3), b.Input("y", F32, 4, 5))
		}, "node %2: matmul(f32[2,3], f32[4,5]): inner dimensions 3 and 4 differ"},
		{"broadcast", func(b *Builder) {
			b.Add(b.Input("x", F32, 2, 3), b.Input("y", F32, 4))
		}, "shapes [2,3] and [4] do not broadcast"},
		{"dtype mix", func(b *Builder) {
			b.Add(b.Input("x", F32, 2), b.Input("y", F16, 2))
		}, "add(f32[2], f16[2]): operand dtypes f32 and f16 differ (cast first)"},
		{"reshape count", func(b *Builder) {
			b.Reshape(b.Input("x", F32, 2, 3), 4)
		}, "reshape(f32[2,3]): cannot reshape [2,3] (6 elements) to [4] (4)"},
		{"slice range", func(b *Builder) {
			b.Slice(b.Input("x", F32, 2, 3), 1, 2, 9, 1)
		}, "axis 1: slice [2:9] of extent 3"},
		{"gqa heads", func(b *Builder) {
			q := b.Input("q", F32, 1, 3, 4, 8)
			k := b.Input("k", F32, 1, 2, 4, 8)
			b.Attention(q, k, k, 0.3, true, 0)
		}, "3 query heads do not divide into 2 key heads"},
		{"log of int", func(b *Builder) { b.Log(b.Input("x", I32, 2)) }, "log of i32; want a float type"},
		{"negative dim", func(b *Builder) { b.Input("x", F32, 2, -1) }, "dimension 1 is negative"},
		{"duplicate leaf", func(b *Builder) {
			b.Input("x", F32, 2)
			b.Output("y", b.Weight("x", F32, 2))
		}, `a second input, weight or state named "x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBuilder("g")
			tc.build(b)
			_, err := b.Build()
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestBuilderFirstErrorWins(t *testing.T) {
	b := NewBuilder("g")
	bad := b.MatMul(b.Input("x", F32, 2, 3), b.Input("y", F32, 4, 5))
	require.Equal(t, NoValue, bad)
	b.Output("z", b.Exp(b.Add(bad, bad)))
	_, err := b.Build()
	require.ErrorContains(t, err, "inner dimensions")
}

func TestTolerance(t *testing.T) {
	require.Zero(t, Tolerance(I32, 10))
	require.Less(t, Tolerance(F32, 1), 1e-5)
	require.Less(t, Tolerance(F32, 1), Tolerance(F32, 4096))
	require.Less(t, Tolerance(F32, 4096), Tolerance(BF16, 1))
	require.Less(t, Tolerance(F16, 1), Tolerance(BF16, 1))
}

func TestCompareUsesMagnitude(t *testing.T) {
	// x - y with x, y large and nearly equal: the result is tiny, and an
	// error of f32 rounding on x and y is far larger than the result.
	b := NewBuilder("cancel")
	x := b.Input("x", F32, 1)
	y := b.Input("y", F32, 1)
	b.Output("d", b.Sub(x, y))
	g, err := b.Build()
	require.NoError(t, err)
	feeds := map[string]*Tensor{"x": mustTensor(t, F32, Shape{1}, 1000.5), "y": mustTensor(t, F32, Shape{1}, 1000.25)}
	res, err := Eval(context.Background(), g, feeds, EvalOptions{Magnitude: true})
	require.NoError(t, err)
	require.Equal(t, 0.25, res.Outputs["d"].At(0))
	require.Equal(t, 2000.75, res.Magnitudes["d"].At(0))
	got := mustTensor(t, F32, Shape{1}, 0.25+2000.75*1e-7)
	mm, err := Compare(got, res.Outputs["d"], res.Magnitudes["d"], 1)
	require.NoError(t, err)
	require.Nil(t, mm, "an error of 1e-7 of the magnitude passes")
	mm, err = Compare(got, res.Outputs["d"], nil, 1)
	require.NoError(t, err)
	require.NotNil(t, mm, "against the result alone it fails")
	require.Contains(t, mm.String(), "element 0")
	bad := mustTensor(t, F32, Shape{1}, math.NaN())
	mm, err = Compare(bad, res.Outputs["d"], nil, 1)
	require.NoError(t, err)
	require.NotNil(t, mm)
}

func TestRandomFeedsFollowDomains(t *testing.T) {
	b := NewBuilder("domains")
	p := b.Input("p", F32, 64)
	table := b.Weight("table", F32, 10, 4)
	ids := b.Input("ids", I64, 32)
	b.Output("l", b.Log(b.Reshape(p, 8, 8)))
	b.Output("e", b.Gather(table, ids, 0))
	b.Output("m", b.Input("mask", Bool, 16))
	g, err := b.Build()
	require.NoError(t, err)
	for _, mode := range []RandomMode{Typical, Stress} {
		feeds, err := RandomFeeds(g, 7, mode)
		require.NoError(t, err)
		for _, v := range feeds["p"].Float64s() {
			require.Greater(t, v, 0.0)
		}
		for _, v := range feeds["ids"].Float64s() {
			require.True(t, v >= 0 && v < 10 && v == math.Trunc(v))
		}
		for name, f := range feeds {
			require.False(t, allZero(f.Float64s()), "%s is all zeros", name)
		}
		again, err := RandomFeeds(g, 7, mode)
		require.NoError(t, err)
		require.Equal(t, feeds, again, "seeded")
		_, err = Eval(context.Background(), g, feeds, EvalOptions{})
		require.NoError(t, err)
	}
}

func TestEvalErrors(t *testing.T) {
	b := NewBuilder("e")
	x := b.Input("x", F32, 2)
	b.Output("y", b.Gather(x, b.Input("i", I64, 1), 0))
	g, err := b.Build()
	require.NoError(t, err)
	_, err = Eval(context.Background(), g, map[string]*Tensor{"x": mustTensor(t, F32, Shape{2}, 1, 2)}, EvalOptions{})
	require.ErrorContains(t, err, `no input named "i" was fed`)
	_, err = Eval(context.Background(), g, map[string]*Tensor{
		"x": mustTensor(t, F32, Shape{2}, 1, 2), "i": mustTensor(t, I64, Shape{1}, 5)}, EvalOptions{})
	require.ErrorContains(t, err, "node %2 (gather): index 5 out of range for extent 2")
	_, err = Eval(context.Background(), g, map[string]*Tensor{
		"x": mustTensor(t, F32, Shape{3}, 1, 2, 3), "i": mustTensor(t, I64, Shape{1}, 0)}, EvalOptions{})
	require.ErrorContains(t, err, "got f32[3], want f32[2]")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = Eval(ctx, g, nil, EvalOptions{})
	require.ErrorIs(t, err, context.Canceled)
}

func TestStateUpdate(t *testing.T) {
	b := NewBuilder("cache")
	cache := b.State("kv", F32, 1, 4)
	x := b.Input("x", F32, 1, 1)
	upd := b.SliceUpdate(cache, x, 1, 2)
	b.UpdateState(cache, upd)
	b.Output("sum", b.Sum(upd, 1))
	g, err := b.Build()
	require.NoError(t, err)
	res, err := Eval(context.Background(), g, map[string]*Tensor{
		"kv": mustTensor(t, F32, Shape{1, 4}, 1, 2, 3, 4), "x": mustTensor(t, F32, Shape{1, 1}, 10)}, EvalOptions{})
	require.NoError(t, err)
	require.Equal(t, []float64{1, 2, 10, 4}, res.States["kv"].F64)
	require.Equal(t, []float64{17}, res.Outputs["sum"].F64)
}

// Leaves of largeLeaf elements or more are drawn in chunks in parallel:
// the values must not depend on GOMAXPROCS, must follow the leaf's domain
// and dtype, and float leaves keep float32 storage.
func TestRandomFeedsLargeLeaves(t *testing.T) {
	b := NewBuilder("large")
	n := largeLeaf + drawChunk/2 // a partial last chunk
	p := b.Weight("p", F32, Dim(n))
	h := b.Input("h", BF16, Dim(n))
	table := b.Weight("table", F32, 10, 4)
	ids := b.Input("ids", I64, Dim(n))
	b.Output("l", b.Log(p))
	b.Output("h2", b.Add(h, h))
	b.Output("e", b.Gather(table, ids, 0))
	g, err := b.Build()
	require.NoError(t, err)
	feedsAt := func(procs int) map[string]*Tensor {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		feeds, err := RandomFeeds(g, 11, Typical)
		require.NoError(t, err)
		return feeds
	}
	one, four := feedsAt(1), feedsAt(4)
	require.Equal(t, one, four, "the values do not depend on GOMAXPROCS")
	require.Len(t, one["p"].F32, n)
	require.Nil(t, one["p"].F64)
	// One assertion per element would take most of the test's time
	// under the race detector: check, and assert only what fails.
	for i, v := range one["p"].F32 {
		if v <= 0 {
			require.Greater(t, v, float32(0), "element %d: positive for log", i)
		}
	}
	for i, v := range one["h"].F32 {
		if BF16.Round(float64(v)) != float64(v) {
			require.Equal(t, BF16.Round(float64(v)), float64(v), "element %d: bf16 values", i)
		}
	}
	seen := map[float64]bool{}
	for i, v := range one["ids"].Float64s() {
		if !(v >= 0 && v < 10 && v == math.Trunc(v)) {
			require.Fail(t, "index out of range", "element %d: %v", i, v)
		}
		seen[v] = true
	}
	require.Len(t, seen, 10, "every index drawn")
	// Chunks draw from different streams: no chunk repeats the first.
	first := one["h"].F32[:drawChunk]
	for c := 1; c < n/drawChunk; c++ {
		require.NotEqual(t, first, one["h"].F32[c*drawChunk:(c+1)*drawChunk])
	}
	require.Less(t, math.Abs(mean(one["h"].F32)), 0.01, "centred values")
	require.InDelta(t, 1, variance(one["h"].F32), 0.02, "unit variance")
	// The typical float leaves' fast path: typicalValue of each word of
	// the chunk's stream, rounded to the dtype.
	for i, nd := range g.Nodes {
		if nd.Name != "h" {
			continue
		}
		rng := rand.New(rand.NewPCG(11^0x1a26e, uint64(i)<<32|1)) // chunk 1
		for j := range 1000 {
			require.Equal(t, float32(BF16.Round(float64(typicalValue(rng.Uint64())))), one["h"].F32[drawChunk+j])
		}
	}
	_, err = Eval(context.Background(), g, one, EvalOptions{})
	require.NoError(t, err)
}

// variance is the population variance of v.
func variance(v []float32) float64 {
	m, sum := mean(v), 0.0
	for _, x := range v {
		sum += (float64(x) - m) * (float64(x) - m)
	}
	return sum / float64(len(v))
}

func mean(v []float32) float64 {
	s := 0.0
	for _, x := range v {
		s += float64(x)
	}
	return s / float64(len(v))
}

// RandomFeedsInto draws what RandomFeeds draws, the large float leaves
// into the storage it is given (whatever that held before), the others as
// RandomFeeds does.
func TestRandomFeedsInto(t *testing.T) {
	b := NewBuilder("into")
	w := b.Weight("w", F32, largeLeaf+3)
	p := b.Weight("p", BF16, largeLeaf)
	s := b.Input("s", F32, 5)
	b.Output("y", b.Add(b.Sum(w, 0), b.Sum(b.Log(b.Cast(p, F32)), 0)))
	b.Output("z", s)
	g, err := b.Build()
	require.NoError(t, err)
	want, err := RandomFeeds(g, 3, Typical)
	require.NoError(t, err)
	var given [][]float32
	got, err := RandomFeedsInto(g, 3, Typical, func(n int) []float32 {
		s := make([]float32, n+7)[:n]
		for i := range s {
			s[i] = float32(i) // stale contents, all overwritten
		}
		given = append(given, s)
		return s
	})
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Len(t, given, 2, "one take per large float leaf")
	for _, name := range []string{"w", "p"} {
		require.True(t, slices.ContainsFunc(given, func(s []float32) bool { return &s[0] == &got[name].F32[0] }), "%s is in the given storage", name)
	}
	_, err = RandomFeedsInto(g, 3, Typical, func(n int) []float32 { return make([]float32, n-1) })
	require.ErrorContains(t, err, "given storage")
}
