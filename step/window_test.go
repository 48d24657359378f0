package step

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLayerWindows: a layout of layers with their own windows validates
// one window a layer and not beside a uniform Window, and WindowOf reads
// them; Within holds a workload's keys and cached positions to a layer's
// window, exactly for listed sequences.
func TestLayerWindows(t *testing.T) {
	l := Layout{MaxTokens: 16, MaxSeqs: 4, BlockSize: 4, Blocks: 64, BlocksPerSeq: 16, KVHeads: 2, HeadDim: 8, Layers: 3, Vocab: 10,
		LayerWindows: []int{8, 0, 8}}
	require.NoError(t, l.Validate())
	assert.Equal(t, []int{8, 0, 8}, []int{l.WindowOf(0), l.WindowOf(1), l.WindowOf(2)})
	for _, bad := range []Layout{
		func() Layout { b := l; b.LayerWindows = []int{8, 0}; return b }(),
		func() Layout { b := l; b.Window = 8; return b }(),
		func() Layout { b := l; b.LayerWindows = []int{8, -1, 0}; return b }(),
	} {
		assert.Error(t, bad.Validate(), "%v", bad.LayerWindows)
	}
	uniform := l
	uniform.LayerWindows, uniform.Window = nil, 8
	assert.Equal(t, 8, uniform.WindowOf(2))

	// A chunk of 5 tokens after 10 positions and a decode after 3.
	w, err := l.WorkloadOf([]SeqWork{{Tokens: 5, Context: 10}, {Tokens: 1, Context: 3}})
	require.NoError(t, err)
	assert.Equal(t, float64(11+12+13+14+15+4), w.Keys)
	assert.Equal(t, float64(13), w.Cached)
	keys, cached := w.Within(0)
	assert.Equal(t, [2]float64{w.Keys, w.Cached}, [2]float64{keys, cached})
	keys, cached = w.Within(8)
	assert.Equal(t, [2]float64{5*8 + 4, 8 + 3}, [2]float64{keys, cached})
	// The uniform window's workload is already within it.
	uw, err := uniform.WorkloadOf([]SeqWork{{Tokens: 5, Context: 10}, {Tokens: 1, Context: 3}})
	require.NoError(t, err)
	assert.Equal(t, [2]float64{keys, cached}, [2]float64{uw.Keys, uw.Cached})
	k2, c2 := uw.Within(8)
	assert.Equal(t, [2]float64{keys, cached}, [2]float64{k2, c2})
	// Priced's workload, held as Priced holds a uniform window.
	p, up := l.Priced(2), uniform.Priced(2)
	k3, c3 := p.Within(8)
	assert.Equal(t, [2]float64{up.Keys, up.Cached}, [2]float64{k3, c3})
}
