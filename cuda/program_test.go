package cuda

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/rules"
	"github.com/stretchr/testify/require"
)

// TestPrintNaivePrograms lowers the naive program (one kernel per op) of
// tiny corpus graphs, prints every launch and compiles them all with NVRTC
// for sm_90: every one-op kernel except attention's has a printed form.
func TestPrintNaivePrograms(t *testing.T) {
	// Parallel: independent of the other tests, it shares the machine's
	// cores with them once the sequential tests are done.
	t.Parallel()
	lib, libErr := nvrtc.Load()
	if libErr != nil && os.Getenv("LUMSEARCH_REQUIRE_NVRTC") == "1" {
		t.Fatal(libErr)
	}
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
			res, err := lib.Compile(context.Background(), NVRTCPrelude+Source(ks), name+".cu", nvrtc.Options{Arch: "sm_90"})
			require.NoError(t, err)
			require.Len(t, res.Kernels, len(Distinct(ks)))
		})
	}
}

// TestCompileEveryTinyCorpusGraph runs the compile pipeline (search,
// extraction, lowering, printing) on every tiny corpus graph (every other
// one under the race detector) and compiles its distinct kernels with
// NVRTC for sm_90. The programs are corpusFused's, which
// TestEmulateCorpusPrograms runs under the emulation.
func TestCompileEveryTinyCorpusGraph(t *testing.T) {
	// Parallel: the package's longest tests, independent of each other,
	// share the machine's cores once the sequential tests are done.
	t.Parallel()
	lib, err := nvrtc.Load()
	if err != nil {
		if os.Getenv("LUMSEARCH_REQUIRE_NVRTC") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	i := 0
	for _, name := range corpus.Names() {
		if !strings.HasPrefix(name, "tiny-") {
			continue
		}
		// Under the race detector every other graph: the pipeline's Go
		// code is several times slower there, and the kinds alternate so
		// both halves cover every kind of model.
		if i++; raceEnabled && i%2 == 0 {
			continue
		}
		t.Run(name, func(t *testing.T) {
			ks := corpusFused(t, name).ks
			res, err := lib.Compile(context.Background(), NVRTCPrelude+Source(ks), "kernels.cu", nvrtc.Options{Arch: "sm_90"})
			require.NoError(t, err)
			require.Len(t, res.Kernels, len(Distinct(ks)))
		})
	}
}
