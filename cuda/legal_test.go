package cuda

import (
	"context"
	"fmt"
	"os/exec"
	"sort"
	"testing"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/rules"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEveryLegalKernelPrints saturates tiny corpus graphs with every rule
// set and prints every kernel node of their e-graphs under every schedule
// the cost model lists for it: whatever Legal lets into the e-graph, the
// printer must print, in every schedule it may be priced at (f32 graphs
// here; the half-precision sweep of matmul bodies is in
// tensorcore_test.go). A sample of them runs under emulation against the
// reference interpreter, each in its default schedule and in one other.
func TestEveryLegalKernelPrints(t *testing.T) {
	// Parallel: the package's longest tests, independent of each other,
	// share the machine's cores once the sequential tests are done.
	t.Parallel()
	dev, err := cost.LookupDevice("h100")
	require.NoError(t, err)
	model := cost.NewModel(dev, cost.Defaults(dev))
	names := []string{"tiny-llama:layer", "tiny-gpt2:block", "tiny-llama:decode", "tiny-qwen2:layer", "tiny-mistral:layer"}
	if testing.Short() {
		// The long test command sweeps them all.
		names = names[:2]
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			pays := corpusKernels(t, name, ir.F32)
			failures := map[string]int{}
			schedules := 0
			for _, p := range pays {
				body, _ := rules.Spec(p)
				if _, err := PrintKernel("k", "", body); err != nil {
					failures[fmt.Sprintf("%s: %v", rules.FormOf(body), err)]++
				}
				ranked, err := model.Ranked(body)
				require.NoError(t, err)
				// A matmul's schedules print a few variants of code with
				// other constants: the best three and the first of each
				// variant (scheduleVariant) cover them.
				seen := map[string]bool{}
				for i, e := range ranked {
					if v, ok := scheduleVariant(body, e.Schedule); ok {
						if seen[v] && i >= 3 {
							continue
						}
						seen[v] = true
					}
					if _, err := PrintKernelWith("k", "", body, e.Schedule); err != nil {
						failures[fmt.Sprintf("%s, %s: %v", rules.FormOf(body), e.Schedule, err)]++
					}
					schedules++
				}
			}
			var msgs []string
			for m, count := range failures {
				msgs = append(msgs, fmt.Sprintf("%d x %s", count, m))
			}
			sort.Strings(msgs)
			t.Logf("%s: %d kernel bodies, %d schedules", name, len(pays), schedules)
			assert.Empty(t, msgs)
			if _, err := exec.LookPath("g++"); err != nil {
				return
			}
			// A deterministic sample runs under emulation against the
			// reference (bodies with gathers aside: random indices would
			// fall outside their tables).
			var kernels []*Kernel
			var args [][]*ir.Tensor
			var outs [][]ir.ValueType
			var wants []*ir.Result
			for i := 0; i < len(pays) && len(kernels) < 48; i += 1 + len(pays)/24 {
				body, _ := rules.Spec(pays[i])
				gather := false
				for _, n := range body.Nodes {
					gather = gather || n.Op == ir.OpGather
				}
				if gather {
					continue
				}
				k, err := PrintKernel(fmt.Sprintf("s%d", len(kernels)), "", body)
				require.NoError(t, err)
				ranked, err := model.Ranked(body)
				require.NoError(t, err)
				other, err := PrintKernelWith(fmt.Sprintf("s%d_%d", len(kernels), i%len(ranked)), "", body, ranked[i%len(ranked)].Schedule)
				require.NoError(t, err)
				feeds, err := ir.RandomFeeds(body, uint64(i), ir.Typical)
				require.NoError(t, err)
				want, err := ir.Eval(context.Background(), body, feeds, ir.EvalOptions{Magnitude: true})
				require.NoError(t, err)
				var in []*ir.Tensor
				for _, v := range body.Inputs() {
					in = append(in, feeds[body.Node(v).Name])
				}
				var vt []ir.ValueType
				for _, o := range body.Outputs {
					on := body.Node(o.Value)
					vt = append(vt, ir.ValueType{Shape: on.Shape, DType: on.DType})
				}
				kernels, args, outs, wants = append(kernels, k, other), append(args, in, in), append(outs, vt, vt), append(wants, want, want)
			}
			require.GreaterOrEqual(t, len(kernels), 32)
			t.Logf("%s: %d sampled bodies emulated", name, len(kernels))
			got, err := Emulate(context.Background(), kernels, args, outs, emu.Options{})
			require.NoError(t, err)
			for i, k := range kernels {
				for j := range outs[i] {
					name := fmt.Sprintf("out%d", j)
					w := wants[i].Outputs[name]
					mm, err := ir.Compare(got[i][j], w, wants[i].Magnitudes[name], 1024)
					require.NoError(t, err)
					assert.Nil(t, mm, "%s (%s) output %d: %v\n%s", k.Name, k.Schedule, j, mm, k.Text)
				}
			}
		})
	}
}
