package cuda

import (
	"context"
	"os/exec"
	"sort"
	"testing"

	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/require"
)

// TestEmulatedKernelsMatchReference prints every test kernel, runs the
// CUDA text under the CPU emulation (in thread order and with shuffled
// threads) on random inputs, and compares each output with the reference
// interpreter's, errors measured against the magnitude of the summed terms.
func TestEmulatedKernelsMatchReference(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	bodies := elementwiseBodies(t)
	for name, body := range matmulBodies(t) {
		bodies[name] = body
	}
	bodies["attention_prefill"] = attentionBody(t, 5, 5)
	bodies["attention_decode"] = attentionBody(t, 1, 70)
	bodies["attention_bf16"] = attentionBodyOf(t, ir.BF16, 5, 37)
	bodies["attention_f16"] = attentionBodyOf(t, ir.F16, 1, 40)
	var names []string
	for name := range bodies {
		names = append(names, name)
	}
	sort.Strings(names)
	var kernels []*Kernel
	var args [][]*ir.Tensor
	var outs [][]ir.ValueType
	var wants []*ir.Result
	for i, name := range names {
		body := bodies[name]
		k, err := PrintKernel(name, "test kernel "+name, body)
		require.NoError(t, err)
		feeds, err := ir.RandomFeeds(body, uint64(i+1), ir.Typical)
		require.NoError(t, err)
		if name == "gather_rows" {
			ids := feeds["$1"]
			require.NotZero(t, ids.Len())
			for j := range ids.Len() {
				ids.SetInt(j, j*7%20-10) // negative ones count from the end
			}
		}
		want, err := ir.Eval(context.Background(), body, feeds, ir.EvalOptions{Magnitude: true})
		require.NoError(t, err)
		var in []*ir.Tensor
		for _, v := range body.Inputs() {
			in = append(in, feeds[body.Node(v).Name])
		}
		var vt []ir.ValueType
		for _, o := range body.Outputs {
			n := body.Node(o.Value)
			vt = append(vt, ir.ValueType{Shape: n.Shape, DType: n.DType})
		}
		kernels, args, outs, wants = append(kernels, k), append(args, in), append(outs, vt), append(wants, want)
	}
	for _, opt := range []emu.Options{{}, {Shuffle: true, Seed: 3}} {
		got, err := Emulate(context.Background(), kernels, args, outs, opt)
		require.NoError(t, err)
		for i, name := range names {
			for j, o := range bodies[name].Outputs {
				mm, err := ir.Compare(got[i][j], wants[i].Outputs[o.Name], wants[i].Magnitudes[o.Name], 1024)
				require.NoError(t, err)
				require.Nil(t, mm, "%s output %d (shuffled %v): %v", name, j, opt.Shuffle, mm)
			}
		}
	}
}
