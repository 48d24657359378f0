package cuda

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/rules"
	"github.com/lumsearch/lumsearch/step"
)

// TestStepKernelsComputeTheRowsPresent emulates a serving step whose
// row-wise kernels bound their loops by T (or S) and size their grids for
// it, on a batch of fewer tokens and sequences than the maxima: the rows
// past them are never written (the emulation's NaN pattern stays there),
// and the logits of the sequences present and the pools equal the
// reference's. A kernel that stops one row short (its bound planted off by
// one) is caught.
func TestStepKernelsComputeTheRowsPresent(t *testing.T) {
	t.Parallel()
	needCompilers(t)
	opt := corpus.Options{Seq: 16, Step: corpus.StepOptions{MaxTokens: 10, MaxSeqs: 4, BlockSize: 4, KVBlocks: 20}}
	g, err := corpus.Build("tiny-llama:step", opt)
	require.NoError(t, err)
	prog, err := rules.NaiveProgram(context.Background(), g, rules.SaturateOptions{})
	require.NoError(t, err)
	lp, err := lower.FromExtraction(prog.EGraph, g, prog.Classes, prog.Problem, prog.Solution)
	require.NoError(t, err)
	l := *lp.Step
	ks, err := PrintProgram(lp)
	require.NoError(t, err)

	feeds, err := ir.RandomFeeds(g, 21, ir.Typical)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(21, 3))
	b, err := l.Arrange(rng, l.DrawShapes(rng, 2, 8))
	require.NoError(t, err)
	for i := range b.IDs {
		b.IDs[i] = int64(rng.IntN(l.Vocab))
	}
	T, S := int64(b.Tokens()), int64(b.Seqs())
	require.Less(t, T, int64(l.MaxTokens))
	require.Less(t, S, int64(l.MaxSeqs))
	meta, err := l.Feeds(b)
	require.NoError(t, err)
	maps.Copy(feeds, meta)
	want, err := ir.Eval(context.Background(), g, feeds, ir.EvalOptions{Magnitude: true})
	require.NoError(t, err)

	// The grids: smaller than the maxima's for every kernel that follows
	// the rows, and what the emulation launches.
	e, err := NewEmulation(context.Background(), lp, ks, feeds)
	require.NoError(t, err)
	smaller := 0
	for i, k := range ks {
		if k.Rows == nil {
			assert.Equal(t, k.Grid, e.Launches[i].Grid, k.Name)
			continue
		}
		n := T
		if lp.Run[i-len(lp.Prep)].Rows.Seqs {
			n = S
		}
		assert.Equal(t, k.Rows.Of(k.Grid, n), e.Launches[i].Grid, k.Name)
		if e.Launches[i].Grid != k.Grid {
			smaller++
		}
	}
	assert.Positive(t, smaller, "some grids shrink for %d of %d tokens", T, l.MaxTokens)

	check := func(ks []*Kernel) (mismatches []string) {
		outs, states, err := EmulateProgram(context.Background(), lp, ks, feeds, emu.Options{Shuffle: true, Seed: 5})
		require.NoError(t, err)
		// The logits of the sequences present.
		outs, err = l.Present(outs, b)
		require.NoError(t, err)
		w, err := l.Present(want.Outputs, b)
		require.NoError(t, err)
		mag, err := l.Present(want.Magnitudes, b)
		require.NoError(t, err)
		mm, err := ir.Compare(outs[step.Logits], w[step.Logits], mag[step.Logits], 256)
		require.NoError(t, err)
		if mm != nil {
			mismatches = append(mismatches, fmt.Sprintf("logits: %v", mm))
		}
		for name, w := range want.States {
			mm, err := ir.Compare(states[name], w, want.Magnitudes[name], 256)
			require.NoError(t, err)
			if mm != nil {
				mismatches = append(mismatches, fmt.Sprintf("%s: %v", name, mm))
			}
		}
		return mismatches
	}
	require.Empty(t, check(ks))

	// Each kernel alone, at every row (its row count saying all are
	// present), against its body: those over the sequences too.
	var distinct []*Kernel
	var bodies []*ir.Graph
	seen := map[*Kernel]bool{}
	seqs := 0
	for i, k := range ks {
		if seen[k] {
			continue
		}
		seen[k] = true
		distinct, bodies = append(distinct, k), append(bodies, slices.Concat(lp.Prep, lp.Run)[i].Body)
		if k.count != nil && k.count.Sequences && k.Rows != nil {
			seqs++
		}
	}
	require.Positive(t, seqs, "a kernel over the sequences present")
	checks, err := VerifyKernels(context.Background(), distinct, bodies, VerifyOptions{Seed: 3})
	require.NoError(t, err)
	for _, c := range checks {
		assert.Nil(t, c.Mismatch, "%s: %v", c.Kernel, c.Mismatch)
	}

	// One row short in the first kernel that bounds its loop by T.
	broken := make([]*Kernel, len(ks))
	copy(broken, ks)
	var victim *Kernel
	for _, k := range ks {
		if k.Rows != nil && strings.Contains(k.Text, "< lum_t * ") {
			victim = k
			break
		}
	}
	require.NotNil(t, victim, "a kernel bounds its loop by lum_t")
	bad := *victim
	bad.Text = strings.Replace(bad.Text, "< lum_t * ", "< (lum_t - 1) * ", 1)
	for i, k := range broken {
		if k == victim {
			broken[i] = &bad
		}
	}
	assert.NotEmpty(t, check(broken), "%s one row short goes unnoticed", victim.Name)
}
