package lower

import (
	"context"
	"testing"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/extract"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/rules"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func allRewrites(t *testing.T) []*egraph.Rewrite[rules.Data] {
	t.Helper()
	var rws []*egraph.Rewrite[rules.Data]
	for _, s := range rules.Sets() {
		r, err := rules.SetRewrites(s)
		require.NoError(t, err)
		rws = append(rws, r...)
	}
	return rws
}

// checkPlan checks the memory plan: aligned offsets, and no two Temp
// buffers live at the same time overlapping.
func checkPlan(t *testing.T, prog *Program) {
	t.Helper()
	first, last := map[int]int{}, map[int]int{}
	for i, l := range prog.Run {
		for _, o := range l.Outs {
			if _, ok := first[o]; !ok {
				first[o] = i
			}
			last[o] = max(last[o], i)
		}
		for _, a := range l.Args {
			last[a] = max(last[a], i)
		}
	}
	var temps []*Buffer
	for _, b := range prog.Buffers {
		if b.Kind == Temp {
			temps = append(temps, b)
			require.Zero(t, b.Offset%Alignment, "%s misaligned", b.Name)
			require.LessOrEqual(t, b.Offset+b.Bytes, prog.ArenaBytes)
		}
	}
	for i, x := range temps {
		for _, y := range temps[i+1:] {
			liveTogether := first[x.ID] <= last[y.ID] && first[y.ID] <= last[x.ID]
			overlap := x.Offset < y.Offset+y.Bytes && y.Offset < x.Offset+x.Bytes
			require.False(t, liveTogether && overlap, "%s and %s are live together and overlap", x.Name, y.Name)
		}
	}
	require.LessOrEqual(t, prog.ArenaBytes, prog.TempBytes)
}

// TestLowerCorpus lowers the programs extracted from tiny corpus graphs
// (random extractions too) and executes them launch by launch in the
// reference interpreter, with the arena simulated: they must compute what
// the graphs do.
func TestLowerCorpus(t *testing.T) {
	for _, name := range []string{"tiny-llama:layer", "tiny-llama:decode", "tiny-gpt2:block", "tiny-llama:model", "tiny-gpt2:model"} {
		t.Run(name, func(t *testing.T) {
			g, err := corpus.Build(name, corpus.Options{Seq: 4, Past: 2})
			require.NoError(t, err)
			prog, err := rules.SaturateModel(context.Background(), g, allRewrites(t), rules.SaturateOptions{IterLimit: 6, NodeLimit: 40_000})
			require.NoError(t, err)
			feeds, err := ir.RandomFeeds(g, 3, ir.Typical)
			require.NoError(t, err)
			want, err := ir.Eval(context.Background(), g, feeds, ir.EvalOptions{Magnitude: true})
			require.NoError(t, err)
			sols := []*extract.Solution{prog.Solution}
			for seed := range uint64(4) {
				sol, err := extract.Random(prog.Problem, seed)
				require.NoError(t, err)
				sols = append(sols, sol)
			}
			for i, sol := range sols {
				lp, err := FromExtraction(prog.EGraph, g, prog.Classes, prog.Problem, sol)
				require.NoError(t, err)
				checkPlan(t, lp)
				if i == 0 {
					t.Logf("%s: %d launches per run, %d at load, %d buffers; arena %d bytes for %d bytes of intermediates",
						name, len(lp.Run), len(lp.Prep), len(lp.Buffers), lp.ArenaBytes, lp.TempBytes)
				}
				outs, states, err := Execute(context.Background(), lp, feeds)
				require.NoError(t, err, "extraction %d", i)
				for out, w := range want.Outputs {
					mm, err := ir.Compare(outs[out], w, want.Magnitudes[out], 256)
					require.NoError(t, err)
					assert.Nil(t, mm, "extraction %d, output %s: %v", i, out, mm)
				}
				for st, w := range want.States {
					mm, err := ir.Compare(states[st], w, want.Magnitudes[st], 256)
					require.NoError(t, err)
					assert.Nil(t, mm, "extraction %d, state %s: %v", i, st, mm)
				}
			}
		})
	}
}

// TestExecuteCatchesOverlap breaks a plan (every intermediate at offset
// 0) and checks that executing it fails, naming the overwritten buffer.
func TestExecuteCatchesOverlap(t *testing.T) {
	g, err := corpus.Build("tiny-gpt2:block", corpus.Options{Seq: 4})
	require.NoError(t, err)
	prog, err := rules.Saturate(context.Background(), g, rules.LowerRewrites(), rules.SaturateOptions{})
	require.NoError(t, err)
	lp, err := FromExtraction(prog.EGraph, g, prog.Classes, prog.Problem, prog.Solution)
	require.NoError(t, err)
	feeds, err := ir.RandomFeeds(g, 3, ir.Typical)
	require.NoError(t, err)
	_, _, err = Execute(context.Background(), lp, feeds)
	require.NoError(t, err)
	for _, b := range lp.Buffers {
		if b.Kind == Temp {
			b.Offset = 0
		}
	}
	_, _, err = Execute(context.Background(), lp, feeds)
	require.ErrorContains(t, err, "overwrote it in the arena")
}
