package cuda

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/ir"
)

// allDTypes are the ir's dtypes.
var allDTypes = []ir.DType{ir.F32, ir.F16, ir.BF16, ir.I32, ir.I64, ir.Bool}

// opVariant builds one use of an op on values of dtype dt, its operands
// the body's inputs (shapes with tails: 3 rows of 5, odd extents).
type opVariant struct {
	name  string
	build func(b *ir.Builder, dt ir.DType) ir.Value
}

// opVariants lists, for every op that computes (the leaves are a kernel's
// arguments and constants, never a kernel), the uses that exercise its
// kernel's cases: reductions along the last axis (the row form for
// floats) and across rows, softmax along either, attention with grouped
// heads and a causal offset, a matmul widened to f32, a cast to every
// dtype, gathers by i32 and i64 indices, scatters by i32 and i64 slots
// along either axis.
func opVariants() map[ir.Op][]opVariant {
	in := func(b *ir.Builder, name string, dt ir.DType, shape ...ir.Dim) ir.Value {
		return b.Input(name, dt, shape...)
	}
	x := func(b *ir.Builder, dt ir.DType) ir.Value { return in(b, "$0", dt, 3, 5) }
	vs := map[ir.Op][]opVariant{}
	for _, op := range ir.Ops() {
		switch op.Class() {
		case ir.ClassUnary:
			vs[op] = []opVariant{{"", func(b *ir.Builder, dt ir.DType) ir.Value { return b.Unary(op, x(b, dt)) }}}
		case ir.ClassBinary, ir.ClassCompare:
			vs[op] = []opVariant{{"", func(b *ir.Builder, dt ir.DType) ir.Value {
				return b.Apply(op, ir.Attrs{}, x(b, dt), in(b, "$1", dt, 3, 5))
			}}}
		case ir.ClassReduce:
			for _, axis := range []int{1, 0} {
				vs[op] = append(vs[op], opVariant{fmt.Sprintf("axis%d", axis), func(b *ir.Builder, dt ir.DType) ir.Value {
					return b.Apply(op, ir.Attrs{Axis: axis}, x(b, dt))
				}})
			}
		}
	}
	vs[ir.OpWhere] = []opVariant{{"", func(b *ir.Builder, dt ir.DType) ir.Value {
		return b.Where(in(b, "$0", ir.Bool, 3, 5), in(b, "$1", dt, 3, 5), in(b, "$2", dt, 3, 5))
	}}}
	vs[ir.OpPermute] = []opVariant{{"", func(b *ir.Builder, dt ir.DType) ir.Value { return b.Permute(in(b, "$0", dt, 2, 3, 5), 2, 0, 1) }}}
	vs[ir.OpReshape] = []opVariant{{"", func(b *ir.Builder, dt ir.DType) ir.Value { return b.Reshape(x(b, dt), 5, 3) }}}
	vs[ir.OpExpand] = []opVariant{{"", func(b *ir.Builder, dt ir.DType) ir.Value { return b.Expand(in(b, "$0", dt, 3, 1), 3, 5) }}}
	vs[ir.OpSlice] = []opVariant{{"", func(b *ir.Builder, dt ir.DType) ir.Value {
		return b.Apply(ir.OpSlice, ir.Attrs{Starts: []int64{1, 0}, Ends: []int64{6, 5}, Steps: []int64{2, 1}}, in(b, "$0", dt, 7, 5))
	}}}
	vs[ir.OpPad] = []opVariant{{"", func(b *ir.Builder, dt ir.DType) ir.Value { return b.Pad(x(b, dt), []int64{1, 0}, []int64{0, 2}, 1) }}}
	vs[ir.OpConcat] = []opVariant{{"", func(b *ir.Builder, dt ir.DType) ir.Value {
		return b.Concat(1, in(b, "$0", dt, 3, 2), in(b, "$1", dt, 3, 3))
	}}}
	for _, to := range allDTypes {
		vs[ir.OpCast] = append(vs[ir.OpCast], opVariant{"to_" + to.String(), func(b *ir.Builder, dt ir.DType) ir.Value { return b.Cast(x(b, dt), to) }})
	}
	for _, idx := range []ir.DType{ir.I32, ir.I64} {
		vs[ir.OpGather] = append(vs[ir.OpGather], opVariant{"by_" + idx.String(), func(b *ir.Builder, dt ir.DType) ir.Value {
			return b.Gather(in(b, "$0", dt, 6, 5), in(b, "$1", idx, 2, 2), 0)
		}})
	}
	vs[ir.OpSliceUpdate] = []opVariant{{"", func(b *ir.Builder, dt ir.DType) ir.Value {
		return b.SliceUpdate(in(b, "$0", dt, 6, 5), in(b, "$1", dt, 2, 5), 0, 3)
	}}}
	// Scatter by i32 and i64 slots along axis 0 (a pool's rows) and a
	// non-zero axis; the slots are drawn distinct with a -1 among them
	// (ir.RandomSlots).
	for _, idx := range []ir.DType{ir.I32, ir.I64} {
		vs[ir.OpScatter] = append(vs[ir.OpScatter], opVariant{"by_" + idx.String(), func(b *ir.Builder, dt ir.DType) ir.Value {
			return b.Scatter(in(b, "$0", dt, 6, 5), in(b, "$1", dt, 3, 5), in(b, "$2", idx, 3), 0)
		}})
	}
	vs[ir.OpScatter] = append(vs[ir.OpScatter], opVariant{"axis1", func(b *ir.Builder, dt ir.DType) ir.Value {
		return b.Scatter(in(b, "$0", dt, 2, 7, 3), in(b, "$1", dt, 2, 4, 3), in(b, "$2", ir.I32, 4), 1)
	}})
	vs[ir.OpMatMul] = []opVariant{
		{"", func(b *ir.Builder, dt ir.DType) ir.Value {
			return b.MatMul(in(b, "$0", dt, 2, 3, 5), in(b, "$1", dt, 2, 5, 4))
		}},
		{"to_f32", func(b *ir.Builder, dt ir.DType) ir.Value {
			return b.Apply(ir.OpMatMul, ir.Attrs{DType: ir.F32}, in(b, "$0", dt, 3, 5), in(b, "$1", dt, 5, 4))
		}},
	}
	vs[ir.OpSoftmax] = []opVariant{
		{"last", func(b *ir.Builder, dt ir.DType) ir.Value { return b.Softmax(x(b, dt), -1) }},
		{"axis0", func(b *ir.Builder, dt ir.DType) ir.Value { return b.Softmax(x(b, dt), 0) }},
	}
	vs[ir.OpLayerNorm] = []opVariant{{"", func(b *ir.Builder, dt ir.DType) ir.Value {
		return b.LayerNorm(x(b, dt), in(b, "$1", dt, 5), in(b, "$2", dt, 5), 1e-5)
	}}}
	vs[ir.OpRMSNorm] = []opVariant{{"", func(b *ir.Builder, dt ir.DType) ir.Value { return b.RMSNorm(x(b, dt), in(b, "$1", dt, 5), 1e-6) }}}
	vs[ir.OpAttention] = []opVariant{
		{"gqa", func(b *ir.Builder, dt ir.DType) ir.Value {
			return b.Attention(in(b, "$0", dt, 1, 4, 3, 8), in(b, "$1", dt, 1, 2, 5, 8), in(b, "$2", dt, 1, 2, 5, 8), 0.35, false, 0)
		}},
		{"causal", func(b *ir.Builder, dt ir.DType) ir.Value {
			return b.Attention(in(b, "$0", dt, 2, 2, 3, 8), in(b, "$1", dt, 2, 2, 5, 8), in(b, "$2", dt, 2, 2, 5, 8), 0.35, true, 2)
		}},
	}
	// Paged attention over small pools: grouped heads with i32 metadata,
	// and one head a key head with a window, odd head size and i64
	// metadata (the random feeds draw valid metadata, ir.DrawPaged).
	paged := func(T, Hq, Hkv, D, P, S, M ir.Dim, block, window int64, meta ir.DType) func(b *ir.Builder, dt ir.DType) ir.Value {
		return func(b *ir.Builder, dt ir.DType) ir.Value {
			return b.PagedAttention(in(b, "$0", dt, T, Hq, D), in(b, "$1", dt, T, Hkv, D), in(b, "$2", dt, T, Hkv, D),
				in(b, "$3", dt, P, Hkv, D), in(b, "$4", dt, P, Hkv, D), in(b, "$5", meta, S, M), in(b, "$6", meta, S),
				in(b, "$7", meta, S+1), in(b, "$8", meta), 0.35, block, window)
		}
	}
	vs[ir.OpPagedAttention] = []opVariant{
		{"gqa", paged(7, 4, 2, 8, 24, 3, 3, 4, 0, ir.I32)},
		{"window", paged(5, 2, 2, 5, 12, 2, 4, 3, 3, ir.I64)},
	}
	// Mixture of experts: the routing weights are drawn as a route makes
	// them (ir's random feeds). experts itself has no one-op kernel: the
	// lower set rewrites it to experts_up, experts_down and a sum over the
	// slots (rules' split_experts), whose kernels are these.
	vs[ir.OpRoute] = []opVariant{
		{"chosen", func(b *ir.Builder, dt ir.DType) ir.Value { return b.Route(in(b, "$0", dt, 3, 6), 2, ir.GatingChosen) }},
		{"all", func(b *ir.Builder, dt ir.DType) ir.Value { return b.Route(in(b, "$0", dt, 2, 40), 3, ir.GatingAll) }},
	}
	vs[ir.OpExpertsUp] = []opVariant{
		{"swiglu", func(b *ir.Builder, dt ir.DType) ir.Value {
			return b.ExpertsUp(in(b, "$0", dt, 3, 8), in(b, "$1", ir.F32, 3, 4), in(b, "$2", dt, 4, 8, 10), in(b, "$3", dt, 4, 10), 2, ir.GatingSwiGLU, 0)
		}},
		{"clamped", func(b *ir.Builder, dt ir.DType) ir.Value {
			return b.ExpertsUp(in(b, "$0", dt, 2, 8), in(b, "$1", ir.F32, 2, 4), in(b, "$2", dt, 4, 8, 16), in(b, "$3", dt, 4, 16), 2, ir.GatingClampedSwiGLU, 7)
		}},
	}
	vs[ir.OpExpertsDown] = []opVariant{{"", func(b *ir.Builder, dt ir.DType) ir.Value {
		return b.ExpertsDown(in(b, "$0", dt, 3, 2, 5), in(b, "$1", ir.F32, 3, 4), in(b, "$2", dt, 4, 5, 8), in(b, "$3", dt, 4, 8), 2)
	}}}
	return vs
}

// naiveOpBody is one op's one-op kernel body, as the lower rules build it
// (rules.OneOpKernel: the op over inputs, canonical).
type naiveOpBody struct {
	name string
	body *ir.Graph
}

// naiveOpBodies builds every op's variants on every dtype. A combination
// the ir refuses (shape inference: exp of i32, and of bool, say) is not an
// op of the ir and is listed apart; every op must have at least one.
func naiveOpBodies(t *testing.T) (bodies []naiveOpBody, refused []string) {
	variants := opVariants()
	for _, op := range ir.Ops() {
		if op.Class() == ir.ClassLeaf || op == ir.OpExperts || op == ir.OpDequant {
			// experts: see opVariants. A dequant has no kernel of its
			// own either: the kernels reading a quantized weight decode
			// it (dequant_test.go, and search's quantized tests).
			continue
		}
		require.NotEmpty(t, variants[op], "op %s has no test variant", op)
		kept := 0
		for _, v := range variants[op] {
			for _, dt := range allDTypes {
				name := strings.Join(strings.Fields(fmt.Sprintf("%s %s %s", op, v.name, dt)), "_")
				b := ir.NewBuilder(name)
				b.Output("out", v.build(b, dt))
				g, err := b.Build()
				if err != nil {
					refused = append(refused, fmt.Sprintf("%s: %v", name, err))
					continue
				}
				canon, _, err := ir.Canonical(g)
				require.NoError(t, err, name)
				bodies = append(bodies, naiveOpBody{name, canon})
				kept++
			}
		}
		assert.Positive(t, kept, "the ir has op %s on no dtype", op)
	}
	return bodies, refused
}

// TestEveryOpOnEveryDTypeHasANaiveKernel: the naive program (one kernel
// per op) always exists. Every op of the ir on every dtype it accepts has
// a one-op kernel of a printed form (cost.FormOf), that the cost model
// prices and the printer prints in every schedule listed, that NVRTC
// compiles (the default and the best schedule) and that computes what the
// reference does under the emulation (the best schedule, the naive
// program's). Only what the ir itself refuses is left out, and each
// refusal is an error the ir's shape inference names. Under -short NVRTC
// compiles every best schedule and each op variant's default in its first
// dtype (the long test command compiles the default on every dtype).
func TestEveryOpOnEveryDTypeHasANaiveKernel(t *testing.T) {
	// Parallel: independent of the other tests, it shares the machine's
	// cores with them once the sequential tests are done.
	t.Parallel()
	dev, err := cost.LookupDevice("h100")
	require.NoError(t, err)
	model := cost.NewModel(dev, cost.Defaults(dev))
	bodies, refused := naiveOpBodies(t)
	t.Logf("%d one-op kernels; the ir refuses %d combinations:\n%s", len(bodies), len(refused), strings.Join(refused, "\n"))
	var compiled, best []*Kernel
	var bestBodies []*ir.Graph
	defaults := map[string]bool{} // the op variants whose default is compiled
	for i, nb := range bodies {
		_, err := cost.FormOf(nb.body)
		require.NoError(t, err, "%s:\n%s", nb.name, nb.body)
		ranked, err := model.Ranked(nb.body)
		require.NoError(t, err, nb.name)
		for j, e := range ranked {
			k, err := PrintKernelWith(fmt.Sprintf("op%d_s%d", i, j), nb.name, nb.body, e.Schedule)
			require.NoError(t, err, "%s in %s", nb.name, e.Schedule)
			if j == 0 {
				best, bestBodies = append(best, k), append(bestBodies, nb.body)
				compiled = append(compiled, k)
			}
		}
		def, err := PrintKernel(fmt.Sprintf("op%d_default", i), nb.name, nb.body)
		require.NoError(t, err, nb.name)
		// The name is "op variant dtype".
		variant := nb.name[:strings.LastIndexByte(nb.name, '_')]
		if def.Schedule != best[len(best)-1].Schedule && (!testing.Short() || !defaults[variant]) {
			defaults[variant] = true
			compiled = append(compiled, def)
		}
	}
	t.Run("nvrtc", func(t *testing.T) {
		lib, err := nvrtc.Load()
		if err != nil {
			if os.Getenv("LUMSEARCH_REQUIRE_NVRTC") == "1" {
				t.Fatal(err)
			}
			t.Skip(err)
		}
		res, err := lib.Compile(context.Background(), NVRTCPrelude+Source(compiled), "kernels.cu", nvrtc.Options{Arch: "sm_90"})
		require.NoError(t, err)
		for _, k := range compiled {
			_, ok := res.Kernels[k.Name]
			assert.True(t, ok, "no resources for %s (%s)", k.Name, k.Schedule)
		}
	})
	t.Run("emulated", func(t *testing.T) {
		if _, err := exec.LookPath("g++"); err != nil {
			t.Skip("g++ is missing:", err)
		}
		args, outs, wants := referenceRuns(t, bestBodies, 21)
		got, err := Emulate(context.Background(), best, args, outs, emu.Options{Shuffle: true, Seed: 5})
		require.NoError(t, err)
		for i, k := range best {
			mm := compareOutput(t, bestBodies[i], 0, got[i][0], wants[i])
			assert.Nil(t, mm, "%s (%s): %v\n%s", bodies[i].name, k.Schedule, mm, k.Text)
		}
	})
}

// referenceRuns draws seeded inputs for each body (from seed on) and
// evaluates the reference with magnitudes: the arguments, output types and
// results Emulate and ir.Compare take.
func referenceRuns(t *testing.T, bodies []*ir.Graph, seed uint64) (args [][]*ir.Tensor, outs [][]ir.ValueType, wants []*ir.Result) {
	for i, body := range bodies {
		feeds, err := ir.RandomFeeds(body, seed+uint64(i), ir.Typical)
		require.NoError(t, err, body.Name)
		want, err := ir.Eval(context.Background(), body, feeds, ir.EvalOptions{Magnitude: true})
		require.NoError(t, err, body.Name)
		var in []*ir.Tensor
		for _, v := range body.Inputs() {
			in = append(in, feeds[body.Node(v).Name])
		}
		var vt []ir.ValueType
		for _, o := range body.Outputs {
			n := body.Node(o.Value)
			vt = append(vt, ir.ValueType{Shape: n.Shape, DType: n.DType})
		}
		args, outs, wants = append(args, in), append(outs, vt), append(wants, want)
	}
	return args, outs, wants
}

// compareOutput compares output j of body as a kernel computed it with the
// reference's, within the allowance the verifier gives it (the precisions
// on its path through the body, ir.PathEps).
func compareOutput(t *testing.T, body *ir.Graph, j int, got *ir.Tensor, want *ir.Result) *ir.Mismatch {
	o := body.Outputs[j]
	mm, err := ir.CompareWithin(got, want.Outputs[o.Name], want.Magnitudes[o.Name], body.Allowance(o.Value, ir.PathEps(body), 1024))
	require.NoError(t, err)
	return mm
}
