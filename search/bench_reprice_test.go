package search

import (
	"context"
	"testing"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/rules"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBenchRepricesAtThePosition: a decode program's estimates average
// its runtime position over the range, so bench prices each launch again
// at the position it ran: attention reads more keys at a later position,
// the weights' kernels do not change, and the achieved bandwidth follows
// the bytes.
func TestBenchRepricesAtThePosition(t *testing.T) {
	md, err := LoadModel("tiny-llama:decode", ModelOptions{
		Build:  corpus.Options{DType: ir.F32},
		Ranges: map[string]ir.Symbol{corpus.PastSymbol: {Name: corpus.PastSymbol, Lo: 0, Hi: 127}},
	})
	require.NoError(t, err)
	defer md.Close()
	// The naive program (each op a kernel, attention among them) is
	// cheap to build and prices the same way.
	d, err := cost.LookupDevice("h100")
	require.NoError(t, err)
	s := &benchSetup{model: md.Name, g: md.Graph, device: d.Name}
	s.opt, err = naiveBench(context.Background(), md.Graph, rules.SaturateOptions{}, cost.NewModel(d, cost.Defaults(d)))
	require.NoError(t, err)
	at := func(past int64) *BenchReport {
		rep := &BenchReport{Kernels: kernelRows(s, &benchTimes{})}
		for i := range rep.Kernels {
			rep.Kernels[i].MS = 0.01
		}
		repriceAt(s, rep, past)
		return rep
	}
	early, late := at(1), at(120)
	grew := 0
	for i := range early.Kernels {
		e, l := early.Kernels[i], late.Kernels[i]
		require.Positive(t, e.Bytes, "%s", e.Launch)
		assert.GreaterOrEqual(t, l.Bytes, e.Bytes, "%s: fewer bytes at a later position", e.Launch)
		if l.Bytes > e.Bytes {
			grew++
			assert.Greater(t, l.GBps, e.GBps, "%s: the bandwidth follows the bytes", e.Launch)
		}
	}
	assert.Positive(t, grew, "no launch reads more at past=120 than at past=1")
	assert.Greater(t, late.Predicted, early.Predicted)
}
