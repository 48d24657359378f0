package plan

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/rules"
)

// TestBuildReportsResources: each launch carries ptxas's figures for its
// kernel, the stack frame beside registers, shared memory and spills, into
// plan.json.
func TestBuildReportsResources(t *testing.T) {
	g, err := corpus.Build("tiny-llama:decode", corpus.Options{Seq: 3, Past: 1})
	require.NoError(t, err)
	prog, err := rules.NaiveProgram(context.Background(), g, rules.SaturateOptions{})
	require.NoError(t, err)
	lp, err := lower.FromExtraction(prog.EGraph, g, prog.Classes, prog.Problem, prog.Solution)
	require.NoError(t, err)
	ks, err := cuda.PrintProgram(lp)
	require.NoError(t, err)
	// A ptxas log of the kernels: every third one keeps a frame (some
	// with spills), as an accumulator array indexed at run time does.
	var log strings.Builder
	want := map[string]nvrtc.Resources{}
	for i, k := range cuda.Distinct(ks) {
		r := nvrtc.Resources{Registers: 32 + i, SharedBytes: 1024 * (i % 3)}
		if i%3 == 1 {
			r.StackBytes = 64 + 16*i
			if i%2 == 0 {
				r.SpillStores, r.SpillLoads = 8, 12
			}
		}
		want[k.Name] = r
		fmt.Fprintf(&log, "ptxas info    : Compiling entry function '%s' for 'sm_90'\n", k.Name)
		fmt.Fprintf(&log, "ptxas info    : Function properties for %s\n", k.Name)
		fmt.Fprintf(&log, "    %d bytes stack frame, %d bytes spill stores, %d bytes spill loads\n", r.StackBytes, r.SpillStores, r.SpillLoads)
		fmt.Fprintf(&log, "ptxas info    : Used %d registers, used 1 barriers, %d bytes smem\n", r.Registers, r.SharedBytes)
	}
	res := nvrtc.ParseResources(log.String())
	require.Equal(t, want, res)
	p, err := Build(lp, ks, res, nil)
	require.NoError(t, err)
	framed := 0
	for _, l := range append(append([]Launch(nil), p.Prep...), p.Run...) {
		r := want[l.Kernel]
		assert.Equal(t, []int{r.Registers, r.SharedBytes, r.SpillStores, r.StackBytes}, []int{l.Registers, l.Shared, l.Spills, l.Stack}, l.Kernel)
		js, err := json.Marshal(l)
		require.NoError(t, err)
		if r.StackBytes > 0 {
			framed++
			assert.Contains(t, string(js), fmt.Sprintf(`"stack_bytes":%d`, r.StackBytes), l.Kernel)
		} else {
			assert.NotContains(t, string(js), `"stack_bytes"`, l.Kernel)
		}
	}
	assert.Positive(t, framed, "some launch has a stack frame")
}
