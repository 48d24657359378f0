package cuda

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/rules"
)

// The pools of stepPools: slots of heads x dim.
const (
	poolSlots = 40
	poolHeads = 2
	poolDim   = 8
)

// stepPools is a serving step's KV write in small: the key and value
// pools (states [slots, heads, dim] of dt), the step's keys computed from
// x by elementwise work (a rotary-like product and a cast to the pool's
// dtype), the values from v by a cast, both scattered at one slot mapping
// (i32, -1 for a token of no sequence), the states updated with them, and
// an output reading both new pools whole.
func stepPools(t *testing.T, dt ir.DType, tokens int) *ir.Graph {
	t.Helper()
	b := ir.NewBuilder("step")
	row := []ir.Dim{ir.Dim(tokens), poolHeads, poolDim}
	kp := b.State("kpool", dt, poolSlots, poolHeads, poolDim)
	vp := b.State("vpool", dt, poolSlots, poolHeads, poolDim)
	x := b.Input("x", ir.F32, row...)
	k := b.Cast(b.Add(b.Mul(x, b.Input("cos", ir.F32, row...)), b.Neg(x)), dt)
	v := b.Cast(b.Input("v", ir.F32, row...), dt)
	slots := b.Input("slot_mapping", ir.I32, ir.Dim(tokens))
	kp2, vp2 := b.Scatter(kp, k, slots, 0), b.Scatter(vp, v, slots, 0)
	b.UpdateState(kp, kp2)
	b.UpdateState(vp, vp2)
	b.Output("y", b.Add(b.Cast(kp2, ir.F32), b.Cast(vp2, ir.F32)))
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

// lowerStep lowers g's naive or fused program.
func lowerStep(t *testing.T, g *ir.Graph, fused bool) *lower.Program {
	t.Helper()
	var prog *rules.Program
	var err error
	if fused {
		rws, err := everyRuleSet()
		require.NoError(t, err)
		prog, err = rules.SaturateModel(context.Background(), g, rws, rules.SaturateOptions{IterLimit: 8})
		require.NoError(t, err)
	} else {
		prog, err = rules.NaiveProgram(context.Background(), g, rules.SaturateOptions{})
		require.NoError(t, err)
	}
	lp, err := lower.FromExtraction(prog.EGraph, g, prog.Classes, prog.Problem, prog.Solution)
	require.NoError(t, err)
	return lp
}

// slotGuard matches the store of a kernel writing through a Slots window:
// under the slot's bounds check, at the slot's row.
var slotGuard = regexp.MustCompile(`if \(\(unsigned long long\)\(long long\)in\d+\[i0\] < 40ULL\) out\d+\[\(long long\)in\d+\[i0\] \* 16LL`)

// TestScatterPoolPrograms lowers a step's pool writes, naive and fused,
// prints them, and checks that each pool is written in place by a kernel
// whose threads cover the step's rows (T x heads x dim elements, not the
// pool's), each stored at its slot under the slot's bounds check, that
// NVRTC compiles the program, that each writing kernel passes the
// verifier alone, and that the emulated program's pools and output equal
// the reference's (slots of -1 among them).
func TestScatterPoolPrograms(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	tests := []struct {
		dt     ir.DType
		tokens int
		fused  bool
	}{
		{ir.F32, 6, false},
		{ir.BF16, 6, false},
		{ir.BF16, 9, true},
		{ir.F16, 3, true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/tokens=%d/fused=%t", tt.dt, tt.tokens, tt.fused), func(t *testing.T) {
			g := stepPools(t, tt.dt, tt.tokens)
			lp := lowerStep(t, g, tt.fused)
			ks, err := PrintProgram(lp)
			require.NoError(t, err)
			rowElems := int64(tt.tokens * poolHeads * poolDim)
			var writers []*Kernel
			var bodies []*ir.Graph
			for name, id := range lp.Updates {
				buf := lp.Buffers[id]
				require.Equal(t, lower.State, buf.Kind, "state %s is copied, not written in place", name)
				n := 0
				for i, l := range lp.Run {
					j := slices.Index(l.Outs, id)
					if j < 0 {
						continue
					}
					n++
					w, ok, err := l.Window(j)
					require.NoError(t, err)
					require.True(t, ok && w.Slots, "launch %s writes state %s whole", l.Name, name)
					k := ks[len(lp.Prep)+i]
					assert.Equal(t, int((rowElems+int64(k.Block[0])-1)/int64(k.Block[0])), k.Grid[0], "kernel %s's grid", k.Name)
					assert.Regexp(t, slotGuard, k.Text)
					assert.NotContains(t, l.Args, id, "launch %s reads the pool it writes", l.Name)
					if !slices.Contains(writers, k) {
						writers, bodies = append(writers, k), append(bodies, l.Body)
					}
				}
				require.Equal(t, 1, n, "launches writing state %s", name)
			}

			t.Run("nvrtc", func(t *testing.T) {
				lib := nvrtcOrSkip(t)
				res, err := lib.Compile(context.Background(), NVRTCPrelude+Source(ks), "step.cu", nvrtc.Options{Arch: "sm_90"})
				require.NoError(t, err)
				for _, k := range writers {
					assert.Contains(t, res.Kernels, k.Name)
				}
			})
			t.Run("verify", func(t *testing.T) {
				checks, err := VerifyKernels(context.Background(), writers, bodies, VerifyOptions{Seed: 3})
				require.NoError(t, err)
				for i, c := range checks {
					// The slices written compared, in their slots; those
					// at slot -1 written nowhere.
					assert.Positive(t, c.Elements, "kernel %s", c.Kernel)
					assert.Less(t, c.Elements, rowElems*int64(len(bodies[i].Outputs)), "kernel %s: no slice at slot -1", c.Kernel)
					assert.Zero(t, c.Elements%(poolHeads*poolDim), "kernel %s compares part of a slice", c.Kernel)
					assert.Nil(t, c.Mismatch)
				}
			})

			feeds, err := ir.RandomFeeds(g, 9, ir.Typical)
			require.NoError(t, err)
			require.Contains(t, feeds["slot_mapping"].Float64s(), -1.0)
			want, err := ir.Eval(context.Background(), g, feeds, ir.EvalOptions{Magnitude: true})
			require.NoError(t, err)
			outs, states, err := EmulateProgram(context.Background(), lp, ks, feeds, emu.Options{Shuffle: true, Seed: 4})
			require.NoError(t, err)
			compareStates(t, "emulation", states, want)
			mm, err := ir.Compare(outs["y"], want.Outputs["y"], want.Magnitudes["y"], 16)
			require.NoError(t, err)
			require.Nil(t, mm, "output y: %v", mm)
		})
	}
}

// TestScatterSlotOutsideThePool: a slot past the pool's last writes
// nothing (the kernel's bounds check), the other slices land; without the
// check the same write runs into the pool's guard page and the emulation
// reports the out-of-bounds access, as the GPU would corrupt memory.
func TestScatterSlotOutsideThePool(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	g := stepPools(t, ir.F32, 4)
	lp := lowerStep(t, g, false)
	ks, err := PrintProgram(lp)
	require.NoError(t, err)
	feeds, err := ir.RandomFeeds(g, 2, ir.Typical)
	require.NoError(t, err)
	slots, err := ir.TensorOfInts(ir.I32, ir.Shape{4}, poolSlots, 7, -1, 0)
	require.NoError(t, err)
	feeds["slot_mapping"] = slots
	// The reference has no meaning for a slot outside the pool; the
	// kernel's is that of a -1.
	skipped, err := ir.TensorOfInts(ir.I32, ir.Shape{4}, -1, 7, -1, 0)
	require.NoError(t, err)
	refFeeds := map[string]*ir.Tensor{}
	for name, f := range feeds {
		refFeeds[name] = f
	}
	refFeeds["slot_mapping"] = skipped
	_, err = ir.Eval(context.Background(), g, feeds, ir.EvalOptions{})
	require.ErrorContains(t, err, "outside extent 40")
	want, err := ir.Eval(context.Background(), g, refFeeds, ir.EvalOptions{Magnitude: true})
	require.NoError(t, err)
	_, states, err := EmulateProgram(context.Background(), lp, ks, feeds, emu.Options{})
	require.NoError(t, err)
	compareStates(t, "emulation", states, want)

	// Launches with equal bodies share one printed kernel: so do their
	// copies.
	check := regexp.MustCompile(`if \(\(unsigned long long\)\(long long\)in\d+\[i0\] < 40ULL\) `)
	copies := map[*Kernel]*Kernel{}
	unguarded := make([]*Kernel, len(ks))
	for i, k := range ks {
		if copies[k] == nil {
			c := *k
			c.Text = check.ReplaceAllString(k.Text, "")
			copies[k] = &c
		}
		unguarded[i] = copies[k]
	}
	removed := 0
	for k, c := range copies {
		if c.Text != k.Text {
			removed++
		}
	}
	require.Positive(t, removed, "no kernel's slot check was removed")
	_, _, err = EmulateProgram(context.Background(), lp, unguarded, feeds, emu.Options{})
	require.ErrorContains(t, err, "out-of-bounds")
}

// TestScatterVerifierCatchesMisplacedRows: the verifier runs a pool
// writer alone with slots drawn for it (some -1) and passes it; the same
// kernel storing each slice one slot further is caught writing where its
// window does not.
func TestScatterVerifierCatchesMisplacedRows(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	w := lower.Window{Axis: 0, Shape: ir.Shape{poolSlots, poolHeads, poolDim}, Slots: true, Pos: 1}
	b := ir.NewBuilder("rows")
	x := b.Input("$0", ir.F32, 7, poolHeads, poolDim)
	b.Input("$1", ir.I64, 7)
	b.Output(w.OutputName(0), b.Cast(b.Mul(x, x), ir.BF16))
	body, err := b.Build()
	require.NoError(t, err)
	k, err := PrintKernel("rows", "a pool's rows", body)
	require.NoError(t, err)
	c, err := VerifyKernel(context.Background(), k, body, VerifyOptions{Seed: 8})
	require.NoError(t, err)
	assert.Positive(t, c.Elements)

	shifted := *k
	store := regexp.MustCompile(`out0\[\(long long\)in1\[i0\] \* 16LL`)
	require.Regexp(t, store, k.Text)
	shifted.Text = store.ReplaceAllString(k.Text, "out0[((long long)in1[i0] + 1) % 40LL * 16LL")
	_, err = VerifyKernel(context.Background(), &shifted, body, VerifyOptions{Seed: 8})
	require.ErrorContains(t, err, "outside its window")
}
