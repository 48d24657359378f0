package ir

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runtimeDecode is a decode step's core with a runtime position: new rows
// written into a cache at past, causal attention up to past.
const runtimeDecode = `graph g
%0 = state "kv" f32[1,2,8,4]
%1 = input "new" f32[1,2,1,4]
%2 = input "past" i32[]
%3 = slice_update %0, %1, %2 axis=2 offset=0
%4 = input "q" f32[1,2,1,4]
%5 = attention %4, %3, %3, %2 scale=0.5 causal
output "y" = %5
update %0 = %3
symbol "past" 0..7
`

// TestRuntimePosition: the runtime position operand of slice_update and
// attention means what the static offset means at its value, in the
// whole-graph interpreter and in point evaluation, and a value past the
// buffers is an error, not a wrong answer.
func TestRuntimePosition(t *testing.T) {
	g, err := Parse(runtimeDecode)
	require.NoError(t, err)
	require.Equal(t, []Symbol{{Name: "past", Lo: 0, Hi: 7}}, g.Symbols)
	back, err := Parse(g.String())
	require.NoError(t, err)
	assert.Equal(t, g.String(), back.String(), "the text format round-trips")
	assert.Equal(t, Range{0, 7, MeaningSymbol}, InputRanges(g)["past"])

	ctx := context.Background()
	for _, past := range []int64{0, 3, 7} {
		// The same step with the position as a constant offset.
		b := NewBuilder("static")
		kv := b.State("kv", F32, 1, 2, 8, 4)
		full := b.SliceUpdate(kv, b.Input("new", F32, 1, 2, 1, 4), 2, past)
		b.Output("y", b.Attention(b.Input("q", F32, 1, 2, 1, 4), full, full, 0.5, true, past))
		b.UpdateState(kv, full)
		static, err := b.Build()
		require.NoError(t, err)

		feeds, err := RandomFeeds(g, uint64(past)+1, Typical)
		require.NoError(t, err)
		feeds["past"], err = TensorOfInts(I32, Shape{}, past)
		require.NoError(t, err)
		want, err := Eval(ctx, static, feeds, EvalOptions{})
		require.NoError(t, err)
		got, err := Eval(ctx, g, feeds, EvalOptions{})
		require.NoError(t, err)
		assert.Equal(t, want.Outputs["y"].Float64s(), got.Outputs["y"].Float64s(), "past=%d", past)
		assert.Equal(t, want.States["kv"].Float64s(), got.States["kv"].Float64s(), "past=%d", past)

		all := []int64{0, 1, 2, 3, 4, 5, 6, 7}
		vals, _, err := EvalAt(ctx, g, feeds, map[string][]int64{"y": all}, EvalOptions{})
		require.NoError(t, err)
		assert.InDeltaSlice(t, want.Outputs["y"].Float64s(), vals["y"], 1e-12, "point evaluation at past=%d", past)
	}

	feeds, err := RandomFeeds(g, 9, Typical)
	require.NoError(t, err)
	feeds["past"], err = TensorOfInts(I32, Shape{}, 8)
	require.NoError(t, err)
	_, err = Eval(ctx, g, feeds, EvalOptions{})
	assert.ErrorContains(t, err, "runtime position 8")
}

func TestSymbolChecks(t *testing.T) {
	body := `graph g
%0 = input "past" i32[]
%1 = input "x" f32[2]
output "y" = %1
`
	tests := []struct{ name, src, want string }{
		{"no input", body + `symbol "len" 0..3` + "\n", `symbol len in [0, 3] has no input named "len"`},
		{"float input", body + `symbol "x" 0..3` + "\n", `want an integer scalar`},
		{"empty range", body + `symbol "past" 4..3` + "\n", `0 <= LO <= HI`},
		{"negative", body + `symbol "past" -1..3` + "\n", `0 <= LO <= HI`},
		{"too wide", body + `symbol "past" 0..4294967296` + "\n", `does not fit`},
		{"twice", body + `symbol "past" 0..3` + "\n" + `symbol "past" 0..3` + "\n", `two symbols named "past"`},
		{"bad range", body + `symbol "past" 3` + "\n", `want the symbol's range LO..HI`},
		{"position not scalar", "graph g\n%0 = state \"kv\" f32[1,8]\n%1 = input \"r\" f32[1,1]\n%2 = input \"p\" i32[1]\n%3 = slice_update %0, %1, %2 axis=1 offset=0\noutput \"y\" = %3\n", `want an integer scalar`},
		{"position needs causal", "graph g\n%0 = input \"q\" f32[1,1,1,4]\n%1 = input \"p\" i32[]\n%2 = attention %0, %0, %0, %1 scale=0.5\noutput \"y\" = %2\n", `needs causal attention`},
		{"too many operands", "graph g\n%0 = input \"q\" f32[1,1,1,4]\n%1 = input \"p\" i32[]\n%2 = attention %0, %0, %0, %1, %1 scale=0.5 causal\noutput \"y\" = %2\n", `takes 3 or 4 operands, got 5`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.src)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestSymbolBuckets(t *testing.T) {
	tests := []struct {
		s    Symbol
		want []int64
	}{
		{Symbol{Lo: 0, Hi: 0}, []int64{0}},
		{Symbol{Lo: 0, Hi: 7}, []int64{0, 1, 2, 4, 7}},
		{Symbol{Lo: 0, Hi: 8191}, []int64{0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8191}},
		{Symbol{Lo: 100, Hi: 300}, []int64{100, 128, 256, 300}},
		{Symbol{Lo: 5, Hi: 6}, []int64{5, 6}},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.s.Buckets(), "%v", tt.s)
	}
}
