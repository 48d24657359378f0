package search

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/step"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestVerifyPoints(t *testing.T) {
	tests := []struct {
		s    ir.Symbol
		want []int64
	}{
		{ir.Symbol{Lo: 0, Hi: 0}, []int64{0}},
		{ir.Symbol{Lo: 0, Hi: 7}, []int64{0, 2, 3, 4, 7}},
		{ir.Symbol{Lo: 0, Hi: 8191}, []int64{0, 2048, 4096, 4551, 8191}},
		{ir.Symbol{Lo: 3, Hi: 4}, []int64{3, 4}},
	}
	for _, tt := range tests {
		got := verifyPoints(tt.s, 5)
		assert.Equal(t, tt.want, got, "%v", tt.s)
		assert.Contains(t, got, tt.s.Lo)
		assert.Contains(t, got, tt.s.Hi)
	}
}

func TestSymbolBindings(t *testing.T) {
	g, err := corpus.Build("tiny-llama:decode", corpus.Options{Seq: 16, Past: -1, PastMin: 2, PastMax: 12})
	require.NoError(t, err)
	bs, err := symbolBindings(g, nil, 5)
	require.NoError(t, err)
	var seen []int64
	for _, b := range bs {
		seen = append(seen, b["past"])
	}
	assert.Equal(t, verifyPoints(g.Symbols[0], 5), seen)

	bs, err = symbolBindings(g, map[string]int64{"past": 9}, 5)
	require.NoError(t, err)
	assert.Equal(t, []map[string]int64{{"past": 9}}, bs)

	for _, tt := range []struct {
		at   map[string]int64
		want string
	}{
		{map[string]int64{"past": 13}, "outside the range the program was compiled for, 2..12"},
		{map[string]int64{"past": 1}, "outside the range"},
		{map[string]int64{"seq": 3}, "has no runtime extent seq (it has past in [2, 12])"},
	} {
		_, err := symbolBindings(g, tt.at, 5)
		assert.ErrorContains(t, err, tt.want)
		assert.Equal(t, KindOption, KindOf(err))
	}
	static, err := corpus.Build("tiny-llama:decode", corpus.Options{Seq: 16, Past: 3})
	require.NoError(t, err)
	_, err = symbolBindings(static, map[string]int64{"past": 3}, 5)
	assert.ErrorContains(t, err, "the program has no runtime extent past")
}

func TestDimFlag(t *testing.T) {
	d := DimFlag{Pins: Dims{}, Ranges: map[string]ir.Symbol{}}
	require.NoError(t, d.Set("past=0..8191"))
	require.NoError(t, d.Set("batch=1"))
	assert.Equal(t, ir.Symbol{Name: "past", Lo: 0, Hi: 8191}, d.Ranges["past"])
	assert.Equal(t, int64(1), d.Pins["batch"])
	assert.Equal(t, "batch=1,past=0..8191", d.String())
	require.NoError(t, d.Set("past=5"), "a pin replaces a range")
	assert.Empty(t, d.Ranges)
	assert.Equal(t, int64(5), d.Pins["past"])
	require.NoError(t, d.Set("past=0"), "past may be pinned at 0")
	for _, bad := range []string{"past=3..2", "past=-1..4", "past=a..4", "past=..", "=1..2"} {
		assert.Error(t, d.Set(bad), bad)
	}
}

func TestCorpusSymbols(t *testing.T) {
	load := func(name string, o ModelOptions) (*Model, error) { return LoadModel(name, o) }
	m, err := load("tiny-llama:decode", ModelOptions{Build: corpus.Options{Seq: 32, Past: -1}, Ranges: map[string]ir.Symbol{"past": {Name: "past", Lo: 4, Hi: 20}}})
	require.NoError(t, err)
	assert.Equal(t, []ir.Symbol{{Name: "past", Lo: 4, Hi: 20}}, m.Graph.Symbols)
	assert.Equal(t, 4, m.Options.Build.PastMin)

	m, err = load("tiny-llama:decode", ModelOptions{Build: corpus.Options{Seq: 32, Past: -1}, Dims: Dims{"past": 7}})
	require.NoError(t, err)
	assert.Empty(t, m.Graph.Symbols, "a pinned position is static")
	assert.Equal(t, 7, m.Options.Build.Past)

	for _, tt := range []struct {
		name string
		o    ModelOptions
		want string
	}{
		{"tiny-llama:decode", ModelOptions{Build: corpus.Options{Seq: 32, Past: -1}, Dims: Dims{"past": 32}}, "the KV cache holds 32 positions"},
		{"tiny-llama:decode", ModelOptions{Build: corpus.Options{Seq: 32, Past: -1}, Ranges: map[string]ir.Symbol{"past": {Name: "past", Lo: 0, Hi: 40}}}, "so past is at most 31"},
		{"tiny-llama:layer", ModelOptions{Build: corpus.Options{Seq: 32, Past: -1}, Dims: Dims{"past": 3}}, "only a decode step has a position"},
		{"tiny-llama:decode", ModelOptions{Build: corpus.Options{Seq: 32, Past: -1}, Dims: Dims{"sequence": 3}}, "has no dimension sequence"},
	} {
		_, err := load(tt.name, tt.o)
		assert.ErrorContains(t, err, tt.want)
		assert.Equal(t, KindOption, KindOf(err), tt.want)
	}
}

// TestMatchesModelSymbols: a program compiled for one range of a runtime
// extent does not serve a model with another (a kept plan, a folder).
func TestMatchesModelSymbols(t *testing.T) {
	g, err := corpus.Build("tiny-llama:decode", corpus.Options{Seq: 8, Past: -1, PastMax: 5})
	require.NoError(t, err)
	lp := &lower.Program{Symbols: []ir.Symbol{{Name: "past", Lo: 0, Hi: 7}}}
	assert.ErrorContains(t, matchesModel(g, lp), "its runtime extents are past in [0, 5], the program's past in [0, 7]")
	lp.Symbols = nil
	assert.ErrorContains(t, matchesModel(g, lp), "the program's none")
}

func TestCheckExpect(t *testing.T) {
	g, err := corpus.Build("tiny-llama:decode", corpus.Options{Seq: 64, Past: -1})
	require.NoError(t, err)
	require.NoError(t, checkExpect(g, map[string]ir.Symbol{"past": {Name: "past", Lo: 10, Hi: 63}}))
	for _, tt := range []struct {
		e    ir.Symbol
		want string
	}{
		{ir.Symbol{Name: "past", Lo: 10, Hi: 64}, "outside the range past is compiled for, 0..63"},
		{ir.Symbol{Name: "seq", Lo: 1, Hi: 4}, "has no runtime extent seq"},
	} {
		err := checkExpect(g, map[string]ir.Symbol{tt.e.Name: tt.e})
		assert.ErrorContains(t, err, tt.want)
		assert.Equal(t, KindOption, KindOf(err))
	}
}

// TestCheckExpectContext: a serving step's expected context is a range
// of the positions a sequence can have cached; a decode step has none,
// and a range past the longest sequence is refused.
func TestCheckExpectContext(t *testing.T) {
	g, err := corpus.Build("tiny-llama:step", corpus.Options{Seq: 64, Step: corpus.StepOptions{MaxTokens: 16, MaxSeqs: 4, BlockSize: 4, KVBlocks: 64}})
	require.NoError(t, err)
	require.NoError(t, checkExpect(g, map[string]ir.Symbol{"context": {Name: "context", Lo: 0, Hi: 63}}))
	for _, tt := range []struct {
		e    ir.Symbol
		want string
	}{
		{ir.Symbol{Name: "context", Lo: 0, Hi: 64}, "a sequence's context runs 0..63"},
		{ir.Symbol{Name: "context", Lo: 9, Hi: 3}, "a sequence's context runs 0..63"},
		{ir.Symbol{Name: "past", Lo: 1, Hi: 4}, "has no runtime extent past"},
	} {
		err := checkExpect(g, map[string]ir.Symbol{tt.e.Name: tt.e})
		assert.ErrorContains(t, err, tt.want)
		assert.Equal(t, KindOption, KindOf(err))
	}
	d, err := corpus.Build("tiny-llama:decode", corpus.Options{Seq: 64, Past: -1})
	require.NoError(t, err)
	assert.ErrorContains(t, checkExpect(d, map[string]ir.Symbol{"context": {Name: "context", Lo: 1, Hi: 2}}), "has no runtime extent context")

	// The cost model prices the step at the middle of the range.
	_, _, m, err := Pricing{Target: "h100", TuneDB: filepath.Join(t.TempDir(), "tunedb.jsonl"), Expect: map[string]ir.Symbol{"context": {Name: "context", Lo: 20, Hi: 40}}}.Options(context.Background())
	require.NoError(t, err)
	l, err := step.LayoutOf(g)
	require.NoError(t, err)
	assert.Equal(t, 30, stepContext(l, m))
}

func TestExpectedRanges(t *testing.T) {
	g, err := corpus.Build("tiny-llama:decode", corpus.Options{Seq: 64, Past: -1, PastMin: 9, PastMax: 40})
	require.NoError(t, err)
	assert.Equal(t, map[string]ir.Symbol{"past": {Name: "past", Lo: 9, Hi: 40}}, expectedRanges(g, nil), "the compiled range by default")
	user := map[string]ir.Symbol{"past": {Name: "past", Lo: 20, Hi: 30}}
	assert.Equal(t, user, expectedRanges(g, user))
	static, err := corpus.Build("tiny-llama:decode", corpus.Options{Seq: 64, Past: 3})
	require.NoError(t, err)
	assert.Empty(t, expectedRanges(static, nil))

	// A range of one value is a pin; --max-seq is a KV cache's.
	m, err := LoadModel("tiny-llama:decode", ModelOptions{Build: corpus.Options{Seq: 32, Past: -1}, Ranges: map[string]ir.Symbol{"past": {Name: "past", Lo: 0, Hi: 0}}})
	require.NoError(t, err)
	assert.Empty(t, m.Graph.Symbols)
	_, err = LoadModel("tiny-llama:mlp", ModelOptions{Build: corpus.Options{Seq: 4, MaxSeq: 64}})
	assert.ErrorContains(t, err, "only decode, prefill and step have")
}

func TestRangeFlag(t *testing.T) {
	r := RangeFlag{}
	require.NoError(t, r.Set("past=512..4096"))
	require.NoError(t, r.Set("seq=7"))
	assert.Equal(t, ir.Symbol{Name: "past", Lo: 512, Hi: 4096}, r["past"])
	assert.Equal(t, ir.Symbol{Name: "seq", Lo: 7, Hi: 7}, r["seq"], "a value is a range of one")
	assert.Equal(t, "past=512..4096,seq=7..7", r.String())
	assert.Error(t, r.Set("past=9..3"))
}
