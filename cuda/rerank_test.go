package cuda

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/rules"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scheduledProgram lowers a corpus graph's naive program and prints it
// in the h100 model's best schedules.
func scheduledProgram(t *testing.T, name string) (*lower.Program, []*Kernel, *cost.Model) {
	g, err := corpus.Build(name, corpus.Options{Seq: 4})
	require.NoError(t, err)
	prog, err := rules.NaiveProgram(context.Background(), g, rules.SaturateOptions{})
	require.NoError(t, err)
	lp, err := lower.FromExtraction(prog.EGraph, g, prog.Classes, prog.Problem, prog.Solution)
	require.NoError(t, err)
	dev, err := cost.LookupDevice("h100")
	require.NoError(t, err)
	m := cost.NewModel(dev, cost.Defaults(dev))
	ks, err := PrintProgramWith(lp, m.Ranked)
	require.NoError(t, err)
	return lp, ks, m
}

// TestRerankByCompiledResources: when the compiler reports that a kernel's
// chosen schedule needs so many registers that a block no longer fits, the
// kernel is printed again in its best alternative under the same name;
// kernels whose report changes nothing keep their kernel.
func TestRerankByCompiledResources(t *testing.T) {
	lp, ks, m := scheduledProgram(t, "tiny-llama:layer")
	var victim *Kernel
	for _, k := range Distinct(ks) {
		if k.Estimate != nil && len(k.Alternatives) > 0 && strings.HasPrefix(k.Schedule.String(), "bm=") {
			victim = k
			break
		}
	}
	require.NotNil(t, victim, "a scheduled matmul with alternatives")
	var compiled []string
	var mu sync.Mutex // compileSplit calls compile from several goroutines
	units := 0
	compile := func(src string) (map[string]cost.Resources, error) {
		mu.Lock()
		defer mu.Unlock()
		units++
		out := map[string]cost.Resources{}
		for _, line := range strings.Split(src, "\n") {
			if i := strings.Index(line, "__global__ void "); i >= 0 {
				name := line[i+len("__global__ void "):]
				name = name[:strings.IndexByte(name, '(')]
				compiled = append(compiled, name)
				out[name] = cost.Resources{Registers: 32}
				if name == victim.Name {
					out[name] = cost.Resources{Registers: 255, Shared: 1 << 20} // does not fit
				}
			}
		}
		return out, nil
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(3))
	out, changed, err := Rerank(lp, ks, compile, m.Resourced)
	require.NoError(t, err)
	assert.Equal(t, 1, changed)
	assert.Contains(t, compiled, victim.Name+"_alt1")
	assert.Equal(t, 3, units, "one unit per processor")
	seen := map[string]bool{}
	for _, name := range compiled {
		assert.False(t, seen[name], "%s compiled twice", name)
		seen[name] = true
	}
	require.Len(t, out, len(ks))
	for i, k := range out {
		assert.Equal(t, ks[i].Name, k.Name)
		if ks[i] == victim {
			assert.NotEqual(t, victim.Schedule, k.Schedule)
			assert.Equal(t, victim.Alternatives[0].Schedule, k.Schedule, "the next best schedule")
			assert.Contains(t, k.Text, "schedule "+k.Schedule.String())
			assert.NotContains(t, k.Text, "schedule "+victim.Schedule.String())
		} else {
			assert.Same(t, ks[i], k)
		}
	}
}

// TestRerankWithNVRTC reranks with the real compiler's reports: the tiny
// Llama's MLP (matrix-vector and matmul projections, each with its
// alternatives, and the SiLU gate) under -short, its whole layer in the
// long test command (the compiler's optimize and compile rerank layers
// with NVRTC in search's tests).
func TestRerankWithNVRTC(t *testing.T) {
	// Parallel: independent of the other tests, it shares the machine's
	// cores with them once the sequential tests are done.
	t.Parallel()
	lib := nvrtcOrSkip(t)
	name := "tiny-llama:layer"
	if testing.Short() {
		name = "tiny-llama:mlp"
	}
	lp, ks, m := scheduledProgram(t, name)
	compile := func(src string) (map[string]cost.Resources, error) {
		res, err := lib.Compile(context.Background(), NVRTCPrelude+src, "rerank.cu", nvrtc.Options{Arch: "sm_90"})
		if err != nil {
			return nil, err
		}
		out := map[string]cost.Resources{}
		for name, r := range res.Kernels {
			out[name] = cost.Resources{Registers: r.Registers, Shared: r.SharedBytes}
		}
		return out, nil
	}
	out, changed, err := Rerank(lp, ks, compile, m.Resourced)
	require.NoError(t, err)
	t.Logf("%s: %d distinct kernels, %d changed schedule", name, len(Distinct(out)), changed)
	alternatives := 0
	for _, k := range Distinct(out) {
		alternatives += len(k.Alternatives)
	}
	require.Positive(t, alternatives, "some kernel has alternatives to rerank")
	for _, k := range Distinct(out) {
		require.NotNil(t, k.Estimate, k.Name)
		assert.Equal(t, k.Schedule, k.Estimate.Schedule)
		for _, a := range k.Alternatives {
			assert.GreaterOrEqual(t, a.Seconds, k.Estimate.Seconds, "%s: alternatives are slower", k.Name)
		}
	}
}
