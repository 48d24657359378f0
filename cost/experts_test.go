package cost

import (
	"math"
	"testing"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// expertsBody is an experts_up or experts_down body at gpt-oss-120b's
// shapes (hidden 2880, intermediate 2880, 128 experts, top 4) for R rows.
func expertsBody(t *testing.T, up bool, R int) *ir.Graph {
	const H, I, E, k = 2880, 2880, 128, 4
	b := ir.NewBuilder("experts")
	w := b.Input("$1", ir.F32, ir.Dim(R), E)
	if up {
		b.Output("out", b.ExpertsUp(b.Input("$0", ir.BF16, ir.Dim(R), H), w, b.Input("$2", ir.BF16, E, H, 2*I), b.Input("$3", ir.BF16, E, 2*I), k, ir.GatingClampedSwiGLU, 7))
	} else {
		b.Output("out", b.ExpertsDown(b.Input("$0", ir.BF16, ir.Dim(R), k, I), w, b.Input("$2", ir.BF16, E, I, H), b.Input("$3", ir.BF16, E, H), k))
	}
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

// TestExpertsFormsByRows: a decode step's few rows run by slot (a block a
// row's slot: the four chosen experts' weights once), a 512-token chunk's
// by expert (each weight read serving a group of up to 8 of the rows
// choosing it, about 16 here: every expert read twice, which a tensor-core
// grouped GEMM would halve). It logs the priced alternatives.
func TestExpertsFormsByRows(t *testing.T) {
	dev, err := LookupDevice("h100")
	require.NoError(t, err)
	m := NewModel(dev, Defaults(dev))
	for _, c := range []struct {
		R       int
		grouped bool
	}{{1, false}, {512, true}} {
		for _, up := range []bool{true, false} {
			ranked, err := m.Ranked(expertsBody(t, up, c.R))
			require.NoError(t, err)
			assert.Equal(t, c.grouped, ranked[0].Schedule.Grouped, "R=%d up=%v: %s", c.R, up, ranked[0].Schedule)
			experts := ExpectedExperts(128, 4, int64(c.R))
			perExpert := 2880.0 * 2880 * 2
			if up {
				perExpert *= 2
			}
			reads := math.Ceil(float64(c.R) * 4 / experts / float64(ranked[0].Schedule.BM))
			assert.InDelta(t, reads*experts*perExpert, ranked[0].Features.Bytes, 0.01*experts*perExpert+float64(c.R*4*2880*4)+4e6, "R=%d: the expected experts' bytes, once a group of rows", c.R)
			for i, e := range ranked[:min(6, len(ranked))] {
				t.Logf("R=%d up=%v #%d %s: %.1f µs (%s), %.1f MB", c.R, up, i, e.Schedule, e.Seconds*1e6, e.Bound, e.Features.Bytes/1e6)
			}
			for i, e := range ranked {
				if e.Schedule.Grouped != c.grouped {
					t.Logf("R=%d up=%v the other way's best, #%d %s: %.1f µs (%s), %.1f MB", c.R, up, i, e.Schedule, e.Seconds*1e6, e.Bound, e.Features.Bytes/1e6)
					break
				}
			}
		}
	}
}
