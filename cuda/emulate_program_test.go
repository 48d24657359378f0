package cuda

import (
	"context"
	"fmt"
	"maps"
	"math"
	"os/exec"
	"testing"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/rules"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEmulateCorpusPrograms lowers whole corpus graphs, prints every
// launch, runs the CUDA under emulation with the memory plan's arena, and
// compares the outputs and states with the reference interpreter: the
// naive programs of decoder layers (every kernel a one-op kernel) and the
// fused programs of the graphs whose kernels all have a printed form
// (corpusFused's, which TestCompileEveryTinyCorpusGraph compiles).
func TestEmulateCorpusPrograms(t *testing.T) {
	// Parallel: the package's longest tests, independent of each other,
	// share the machine's cores once the sequential tests are done.
	t.Parallel()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	tests := []struct {
		name  string
		fused bool
	}{
		{"tiny-llama:layer", false}, {"tiny-gpt2:block", false}, {"tiny-llama:decode", false},
		{"tiny-llama:layer", true}, {"tiny-gpt2:block", true}, {"tiny-llama:decode", true}, {"tiny-qwen2:layer", true}, {"tiny-mistral:layer", true}, {"tiny-gpt2:decode", true},
		{"tiny-llama:mlp", true}, {"tiny-gpt2:mlp", true}, {"tiny-llama:rmsnorm", true}, {"tiny-gpt2:layernorm", true}, {"tiny-llama:rotary", true},
	}
	if testing.Short() {
		// The long test command emulates them all.
		tests = []struct {
			name  string
			fused bool
		}{{"tiny-llama:layer", false}, {"tiny-llama:decode", true}, {"tiny-gpt2:block", true}}
	}
	for _, tt := range tests {
		t.Run(map[bool]string{true: "fused/", false: "naive/"}[tt.fused]+tt.name, func(t *testing.T) {
			var g *ir.Graph
			var lp *lower.Program
			var ks []*Kernel
			if tt.fused {
				p := corpusFused(t, tt.name)
				g, lp, ks = p.g, p.lp, p.ks
			} else {
				var err error
				g, err = corpus.Build(tt.name, corpus.Options{Seq: 5, Past: 3})
				require.NoError(t, err)
				prog, err := rules.NaiveProgram(context.Background(), g, rules.SaturateOptions{})
				require.NoError(t, err)
				lp, err = lower.FromExtraction(prog.EGraph, g, prog.Classes, prog.Problem, prog.Solution)
				require.NoError(t, err)
				ks, err = PrintProgram(lp)
				require.NoError(t, err)
			}
			feeds, err := ir.RandomFeeds(g, 5, ir.Typical)
			require.NoError(t, err)
			want, err := ir.Eval(context.Background(), g, feeds, ir.EvalOptions{Magnitude: true})
			require.NoError(t, err)
			outs, states, err := EmulateProgram(context.Background(), lp, ks, feeds, emu.Options{})
			require.NoError(t, err)
			t.Logf("%s: %d kernels, arena %d bytes", tt.name, len(ks), lp.ArenaBytes)
			// With the weights and constants encoded once (as a served
			// step's are), a run without them in its feeds is the same.
			enc, err := EncodeFixed(context.Background(), lp, feeds)
			require.NoError(t, err)
			rest := maps.Clone(feeds)
			for _, v := range g.Weights() {
				delete(rest, g.Node(v).Name)
			}
			outs2, states2, err := EmulateProgramEncoded(context.Background(), lp, ks, rest, enc, emu.Options{})
			require.NoError(t, err)
			for name, o := range outs {
				require.Equal(t, o.Float64s(), outs2[name].Float64s(), "output %s with the weights encoded once", name)
			}
			for name, o := range states {
				require.Equal(t, o.Float64s(), states2[name].Float64s(), "state %s with the weights encoded once", name)
			}
			for name, w := range want.Outputs {
				mm, err := ir.Compare(outs[name], w, want.Magnitudes[name], 1024)
				require.NoError(t, err)
				require.Nil(t, mm, "output %s: %v", name, mm)
			}
			for name, w := range want.States {
				mm, err := ir.Compare(states[name], w, want.Magnitudes[name], 1024)
				require.NoError(t, err)
				require.Nil(t, mm, "state %s: %v", name, mm)
			}
			// The element-wise tolerance's first-order magnitudes grow
			// through norms and masked softmax; the relative L2 error of
			// the whole result stays a tight check.
			var diff2, norm2 float64
			for name, w := range want.Outputs {
				for k := range w.Len() {
					g, x := outs[name].At(k), w.At(k)
					diff2 += (g - x) * (g - x)
					norm2 += x * x
				}
			}
			require.Less(t, math.Sqrt(diff2/norm2), 1e-4, "relative L2 error of the outputs")
		})
	}
}

// TestEmulationRefusesPositionOutOfRange: as lum_set_input does, the
// emulation refuses a runtime position outside the program's range before
// any kernel could write a cache row outside the cache.
func TestEmulationRefusesPositionOutOfRange(t *testing.T) {
	lp, ks := hostProgram(t, "tiny-llama:decode@runtime")
	require.Len(t, lp.Symbols, 1)
	s := lp.Symbols[0]
	at, err := ir.TensorOfInts(ir.I32, ir.Shape{}, s.Hi+1)
	require.NoError(t, err)
	_, err = NewEmulation(context.Background(), lp, ks, map[string]*ir.Tensor{s.Name: at})
	assert.ErrorContains(t, err, fmt.Sprintf("%s=%d is outside the range the program was compiled for, %d..%d", s.Name, s.Hi+1, s.Lo, s.Hi))
}
