package cuda

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/rules"
	"github.com/lumsearch/lumsearch/step"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stepCase is a padded batch of step inputs and what Go's check says of
// it ("" when it passes).
type stepCase struct {
	name  string
	feeds map[string]*ir.Tensor
	want  string
}

// stepCases are a good batch and batches that each break one rule of the
// step's contract, padded as a caller hands them to the host library.
func stepCases(t *testing.T, l step.Layout) []stepCase {
	rng := rand.New(rand.NewPCG(4, 4))
	b, err := l.Arrange(rng, []step.SeqShape{{Context: 5, Tokens: 1}, {Context: 0, Tokens: 3}, {Context: 2, Tokens: 2}})
	require.NoError(t, err)
	for i := range b.IDs {
		b.IDs[i] = int64(1 + i)
	}
	edits := []struct {
		name string
		edit func(f map[string]*ir.Tensor)
	}{
		{"good", func(map[string]*ir.Tensor) {}},
		{"padded start", func(f map[string]*ir.Tensor) { f[step.QueryStarts].SetInt(int64(l.MaxSeqs), 2) }},
		{"id", func(f map[string]*ir.Tensor) { f[step.InputIDs].SetInt(1, int64(l.Vocab)) }},
		{"padded slot", func(f map[string]*ir.Tensor) { f[step.SlotMapping].SetInt(int64(l.MaxTokens-1), 0) }},
		{"decreasing", func(f map[string]*ir.Tensor) { f[step.QueryStarts].SetInt(2, 0) }},
		{"short", func(f map[string]*ir.Tensor) { f[step.SeqLens].SetInt(1, 2) }},
		{"long", func(f map[string]*ir.Tensor) { f[step.SeqLens].SetInt(0, int64(l.MaxLen()+1)) }},
		{"block", func(f map[string]*ir.Tensor) { f[step.BlockTable].SetInt(0, int64(l.Blocks)) }},
		{"position", func(f map[string]*ir.Tensor) { f[step.Positions].SetInt(2, 7) }},
		{"slot twice", func(f map[string]*ir.Tensor) {
			// Sequence 2 (2 cached positions, then 2 tokens) takes
			// sequence 1's first block, whose offset 2 both write.
			M, B := int64(l.BlocksPerSeq), int64(l.BlockSize)
			blk := f[step.BlockTable].Int(M)
			f[step.BlockTable].SetInt(2*M, blk)
			f[step.SlotMapping].SetInt(4, blk*B+2)
			f[step.SlotMapping].SetInt(5, blk*B+3)
		}},
		{"slot off the table", func(f map[string]*ir.Tensor) {
			f[step.SlotMapping].SetInt(0, (f[step.SlotMapping].Int(0)+1)%int64(l.Slots()))
		}},
		{"writes a context", func(f map[string]*ir.Tensor) {
			// Sequence 1 (no context) takes sequence 0's first block:
			// its writes land on sequence 0's cached positions.
			f[step.BlockTable].SetInt(int64(l.BlocksPerSeq), f[step.BlockTable].Int(0))
			for t := int64(1); t < 4; t++ {
				f[step.SlotMapping].SetInt(t, f[step.BlockTable].Int(0)*int64(l.BlockSize)+t-1)
			}
		}},
	}
	var out []stepCase
	for _, e := range edits {
		f, err := l.Feeds(b)
		require.NoError(t, err)
		e.edit(f)
		c := stepCase{name: e.name, feeds: f}
		if _, err := l.Unpad(f); err != nil {
			c.want = err.Error()
		}
		out = append(out, c)
	}
	return out
}

// TestHostLibraryChecksStepMetadata: the host library of a serving step
// refuses in lum_run, before any launch, every batch Go's step.Layout
// refuses, with the same words, and runs a good batch (the fake driver
// prints its launches).
func TestHostLibraryChecksStepMetadata(t *testing.T) {
	t.Parallel()
	needCompilers(t)
	fake := fakeDriverDir(t)
	opt := corpus.Options{Seq: 16, Step: corpus.StepOptions{MaxTokens: 8, MaxSeqs: 4, BlockSize: 4, KVBlocks: 10}}
	g, err := corpus.Build("tiny-llama:step", opt)
	require.NoError(t, err)
	prog, err := rules.NaiveProgram(context.Background(), g, rules.SaturateOptions{})
	require.NoError(t, err)
	lp, err := lower.FromExtraction(prog.EGraph, g, prog.Classes, prog.Problem, prog.Solution)
	require.NoError(t, err)
	require.NotNil(t, lp.Step)
	ks, err := PrintProgram(lp)
	require.NoError(t, err)
	ptx, cubin := hostModule(t, ks)
	header, source, err := HostLibrary(lp, ks, ptx, cubin, "sm_90")
	require.NoError(t, err)
	cases := stepCases(t, *lp.Step)
	refused := 0
	for _, c := range cases {
		if c.want != "" {
			refused++
		}
	}
	require.Equal(t, len(cases)-1, refused, "every case but the good one breaks the contract")
	exe := buildHostWith(t, header, source, hostStepProgram(cases))
	out := runHost(t, exe, "LD_LIBRARY_PATH="+fake)
	scaled := 0
	for i, k := range ks[len(lp.Prep):] {
		if k.Rows != nil {
			scaled++
			require.NotNil(t, lp.Run[i].Rows, "%s: a grid for the tokens present on a launch without a row count", k.Name)
		}
	}
	require.Greater(t, scaled, len(lp.Run)/2, "most launches' grids follow the tokens present")
	for _, c := range cases {
		got := runSection(out, "run "+c.name)
		if c.want == "" {
			b, err := lp.Step.Unpad(c.feeds)
			require.NoError(t, err)
			require.Less(t, b.Tokens(), lp.Step.MaxTokens, "the good batch leaves rows past T")
			launches := expectedLaunchesAt(lp, ks, len(lp.Prep), len(ks), int64(b.Tokens()), int64(b.Seqs()))
			assert.NotEqual(t, expectedLaunches(lp, ks, len(lp.Prep), len(ks)), launches, "grids for T differ from those for the maximum")
			assert.Equal(t, launches, got, "run %s: the run's launches", c.name)
			continue
		}
		assert.Empty(t, got, "run %s: no launch", c.name)
		assert.Contains(t, out, "run "+c.name+"\nlum_run: 4: lum_run: "+c.want+"\n", "run %s: the C check says what Go's says", c.name)
	}
}

// hostStepProgram is a C program that loads zeroed weights, then for each
// case sets the step's inputs to the case's arrays and runs, printing the
// result.
func hostStepProgram(cases []stepCase) string {
	var b strings.Builder
	b.WriteString(`#include "model.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static char err[512];

static void report(const char* what, int rc) {
    printf("%s: %d: %s\n", what, rc, rc == LUM_OK ? "ok" : err);
}
`)
	names := []string{step.InputIDs, step.Positions, step.QueryStarts, step.SeqLens, step.BlockTable, step.SlotMapping, step.SeqsSymbol}
	for i, c := range cases {
		for k, name := range names {
			x := c.feeds[name]
			ty := "int32_t"
			if x.DType == ir.I64 {
				ty = "int64_t"
			}
			vals := make([]string, x.Len())
			for j := range vals {
				vals[j] = fmt.Sprint(x.Int(int64(j)))
			}
			fmt.Fprintf(&b, "static %s case%d_%d[] = {%s};\n", ty, i, k, strings.Join(vals, ", "))
		}
	}
	b.WriteString("\n" + hostMainZeroed)
	for i, c := range cases {
		for k, name := range names {
			fmt.Fprintf(&b, "    if ((rc = lum_set_input(m, %q, case%d_%d, sizeof case%d_%d, err, sizeof err)) != LUM_OK) report(\"lum_set_input\", rc);\n", name, i, k, i, k)
		}
		fmt.Fprintf(&b, "    printf(\"run %s\\n\");\n    report(\"lum_run\", lum_run(m, err, sizeof err));\n", c.name)
	}
	b.WriteString("    lum_destroy(m);\n    printf(\"done\\n\");\n    return 0;\n}\n")
	return b.String()
}
