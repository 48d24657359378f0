package cuda

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/rules"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPrintNaivePrograms lowers the naive program (one kernel per op) of
// tiny corpus graphs, prints every launch and compiles them all with NVRTC
// for sm_90: every one-op kernel except attention's has a printed form.
// Under -short NVRTC compiles Llama's layer (which TestHostLibrary compiles
// too: the same source, compiled once) and GPT-2's block, whose ops the
// others' are but for their shapes (TestEveryOpOnEveryDTypeHasANaiveKernel
// compiles every op in every dtype); the long test command compiles all.
func TestPrintNaivePrograms(t *testing.T) {
	// Parallel: independent of the other tests, it shares the machine's
	// cores with them once the sequential tests are done.
	t.Parallel()
	lib, libErr := nvrtc.Load()
	if libErr != nil && os.Getenv("LUMSEARCH_REQUIRE_NVRTC") == "1" {
		t.Fatal(libErr)
	}
	compiled := []string{"tiny-llama:layer", "tiny-gpt2:block"}
	for _, name := range []string{"tiny-llama:layer", "tiny-llama:decode", "tiny-gpt2:block", "tiny-qwen2:layer", "tiny-mistral:layer"} {
		t.Run(name, func(t *testing.T) {
			g, err := corpus.Build(name, corpus.Options{Seq: 4, Past: 2})
			require.NoError(t, err)
			prog, err := rules.NaiveProgram(context.Background(), g, rules.SaturateOptions{})
			require.NoError(t, err)
			lp, err := lower.FromExtraction(prog.EGraph, g, prog.Classes, prog.Problem, prog.Solution)
			require.NoError(t, err)
			ks, err := PrintProgram(lp)
			require.NoError(t, err)
			t.Logf("%s: %d kernels printed", name, len(ks))
			if lib == nil {
				t.Skip(libErr)
			}
			if testing.Short() && !slices.Contains(compiled, name) {
				return
			}
			res, err := compileProgram(lib, ks)
			require.NoError(t, err, name)
			require.Len(t, res.Kernels, len(Distinct(ks)))
		})
	}
}

// TestCompileEveryTinyCorpusGraph runs the compile pipeline (search,
// extraction, lowering, printing) on every tiny corpus graph (a sample
// under the race detector, raceCompileSample) and compiles its distinct
// kernels with NVRTC for sm_90. The programs are corpusFused's, which
// TestEmulateCorpusPrograms runs under the emulation.
func TestCompileEveryTinyCorpusGraph(t *testing.T) {
	// Parallel: the package's longest tests, independent of each other,
	// share the machine's cores once the sequential tests are done.
	t.Parallel()
	lib := nvrtcOrSkip(t)
	families := tinyCorpusNames(t)
	names := slices.Concat(families...)
	if raceEnabled {
		names = raceCompileSample(families)
	}
	if testing.Short() {
		// The long test command compiles them all; a serving step
		// stands for them here.
		names = []string{"tiny-llama:step"}
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			ks := corpusFused(t, name).ks
			res, err := lib.Compile(context.Background(), NVRTCPrelude+Source(ks), "kernels.cu", nvrtc.Options{Arch: "sm_90"})
			require.NoError(t, err)
			require.Len(t, res.Kernels, len(Distinct(ks)))
		})
	}
}

// tinyCorpusNames lists the tiny corpus graphs, family by family, each
// family's kinds in corpus.Kinds' order (its layer first).
func tinyCorpusNames(t *testing.T) [][]string {
	t.Helper()
	var families [][]string
	last := ""
	for _, name := range corpus.Names() {
		if !strings.HasPrefix(name, "tiny-") {
			continue
		}
		model := name[:strings.LastIndexByte(name, ':')]
		if model != last {
			families = append(families, nil)
			last = model
		}
		families[len(families)-1] = append(families[len(families)-1], name)
	}
	require.GreaterOrEqual(t, len(families), 2)
	return families
}

// raceCompileSample is the graphs TestCompileEveryTinyCorpusGraph compiles
// under the race detector, which slows the search several times: every
// family's layer, and each other kind for one dense family, kind j (its
// place in the family's list) for the (j-1)th, modulo their number, of the
// dense families that have a kind j, but the prefill. In the corpus's
// order that makes the whole model GPT-2's and the decode step Llama's,
// programs other tests of the package search anyway. The mixtures of
// experts give their layers (search's tests compile their other kinds).
func raceCompileSample(families [][]string) []string {
	dense := make([]bool, len(families))
	for f, kinds := range families {
		c, err := corpus.EmbeddedConfig(kinds[0][:strings.LastIndexByte(kinds[0], ':')])
		dense[f] = err != nil || c.MoE == nil
	}
	var out []string
	for f, kinds := range families {
		for j, name := range kinds {
			if strings.HasSuffix(name, ":prefill") {
				// The whole model that also writes the KV caches: the
				// model (GPT-2's) and the decode step (Llama's) cover
				// its kernels; search's generation test compiles one.
				continue
			}
			var having []int
			for g, other := range families {
				if j < len(other) && dense[g] {
					having = append(having, g)
				}
			}
			if j == 0 || len(having) > 0 && having[(j-1)%len(having)] == f {
				out = append(out, name)
			}
		}
	}
	return out
}

// TestRaceCompileSample: the race detector's sample compiles every
// family's layer and every other kind once, among them GPT-2's model and
// Llama's decode step (corpusFused's for TestHostLibraryPrepared and
// TestEmulateCorpusPrograms).
func TestRaceCompileSample(t *testing.T) {
	families := tinyCorpusNames(t)
	sample := raceCompileSample(families)
	kinds := 0
	for _, f := range families {
		assert.Contains(t, sample, f[0], "every family's layer")
		kinds = max(kinds, len(f))
	}
	for j := 1; j < kinds; j++ {
		n, prefill := 0, false
		for _, f := range families {
			if j < len(f) && slices.Contains(sample, f[j]) {
				n++
			}
			prefill = prefill || j < len(f) && strings.HasSuffix(f[j], ":prefill")
		}
		if prefill {
			assert.Equal(t, 0, n, "kind %d, the prefill, is left to the model and decode kinds", j)
			continue
		}
		assert.Equal(t, 1, n, "kind %d is compiled for exactly one family", j)
	}
	assert.Subset(t, sample, []string{"tiny-gpt2:model", "tiny-llama:decode"})
	assert.Less(t, len(sample), len(slices.Concat(families...)))
}
