package measure

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/gpu"
	"github.com/lumsearch/lumsearch/internal/fakecuda"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/rules"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGPUMeasurerChecksBeforeTiming runs the GPU measurer on the fake
// driver, which launches nothing: the candidate is compiled by NVRTC,
// loaded, its inputs uploaded and launched with its grid and block, and
// its outputs, never computed, fail the check against the reference, so
// it is not timed.
func TestGPUMeasurerChecksBeforeTiming(t *testing.T) {
	lib, err := nvrtc.Load()
	if err != nil {
		if os.Getenv("LUMSEARCH_REQUIRE_NVRTC") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	f := fakecuda.Build(t)
	f.Set("nparams", 0)
	d, err := gpu.Open()
	require.NoError(t, err)
	dev, err := d.Device(0)
	require.NoError(t, err)
	c, err := dev.PrimaryContext()
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Release()) }()

	body, err := ir.Parse(bodyText(t))
	require.NoError(t, err)
	k, err := cuda.PrintKernelWith("candidate", "", body, mustSchedule(t, "threads=256"))
	require.NoError(t, err)
	resp := GPU{Ctx: c, NVRTC: lib}.Measure(context.Background(), Request{ID: 9, Body: bodyText(t), Schedule: "threads=256", Seed: 1})
	assert.False(t, resp.OK)
	assert.Contains(t, resp.Error, "differs from the reference")
	log := f.Log()
	assert.True(t, strings.HasPrefix(log, "load \x7fELF"), "a CUBIN (ELF) is loaded: %q", log)
	assert.Contains(t, log, fmt.Sprintf("\nlaunch grid=%d,%d,%d block=%d,%d,%d shared=0 stream=0\n", k.Grid[0], k.Grid[1], k.Grid[2], k.Block[0], k.Block[1], k.Block[2]))
	assert.Equal(t, 1, strings.Count(log, "launch"), "not timed after a failed check")
	assert.Equal(t, int32(0), f.Allocs(), "every buffer freed")
}

// TestGPUMeasurerRunsNaiveProgram: a kernel whose output is larger than
// the sampled check's maxChecked elements is also compared with the naive
// program of its body, compiled and run on the same device. The fake
// driver computes nothing and zeroes its memory, so both outputs are zeros
// and agree; the sampled check against the reference interpreter then
// reports the mismatch. What this shows is the wiring (the naive
// program's module is loaded and each of its launches issued, before the
// sampled check); that a differing output is caught is
// TestCompareAll's, and that the numbers agree on a real GPU is the GPU
// check script's.
func TestGPUMeasurerRunsNaiveProgram(t *testing.T) {
	lib, err := nvrtc.Load()
	if err != nil {
		if os.Getenv("LUMSEARCH_REQUIRE_NVRTC") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	f := fakecuda.Build(t)
	d, err := gpu.Open()
	require.NoError(t, err)
	dev, err := d.Device(0)
	require.NoError(t, err)
	c, err := dev.PrimaryContext()
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Release()) }()

	b := ir.NewBuilder("kernel")
	x, y := b.Input("$0", ir.F32, 96, 64), b.Input("$1", ir.F32, 64)
	b.Output("out0", b.Mul(b.Sigmoid(x), b.BroadcastTo(y, ir.Shape{96, 64})))
	body, err := b.Build()
	require.NoError(t, err)
	require.Greater(t, body.Node(body.Outputs[0].Value).Shape.NumElements(), int64(maxChecked))

	resp := GPU{Ctx: c, NVRTC: lib}.Measure(context.Background(), Request{ID: 3, Body: body.String(), Seed: 1})
	assert.False(t, resp.OK)
	assert.Contains(t, resp.Error, "differs from the reference at sampled element")
	log := f.Log()
	assert.Equal(t, 2, strings.Count(log, "load \x7fELF"), "the candidate's CUBIN and the naive program's: %q", log)

	prog, err := rules.NaiveProgram(context.Background(), body, rules.SaturateOptions{})
	require.NoError(t, err)
	lp, err := lower.FromExtraction(prog.EGraph, body, prog.Classes, prog.Problem, prog.Solution)
	require.NoError(t, err)
	ks, err := cuda.PrintProgram(lp)
	require.NoError(t, err)
	naive := log[strings.LastIndex(log, "load \x7fELF"):]
	for _, k := range ks[len(lp.Prep):] {
		assert.Contains(t, naive, fmt.Sprintf("\nlaunch grid=%d,%d,%d block=%d,%d,%d shared=0 stream=0\n", k.Grid[0], k.Grid[1], k.Grid[2], k.Block[0], k.Block[1], k.Block[2]))
	}
	assert.Equal(t, 1+len(lp.Prep)+len(lp.Run), strings.Count(log, "\nlaunch grid="), "one candidate launch, then the naive program's; no timing")
	assert.Equal(t, int32(0), f.Allocs(), "every buffer freed")
}

// TestCompareAll: every element counts in the relative L2 error, a NaN
// where the reference has a number fails whatever the bound, and the
// bound is the dtype's.
func TestCompareAll(t *testing.T) {
	b := ir.NewBuilder("kernel")
	b.Output("out0", b.Sigmoid(b.Input("$0", ir.F32, 4, 1000)))
	body, err := b.Build()
	require.NoError(t, err)
	want := ir.NewTensor(ir.F32, ir.Shape{4, 1000})
	for i := range want.F64 {
		want.F64[i] = 0.5 + float64(i%7)/10
	}
	perturbed := func(i int, v float64) map[string]*ir.Tensor {
		g := ir.NewTensor(ir.F32, ir.Shape{4, 1000})
		copy(g.F64, want.F64)
		g.F64[i] = v
		return map[string]*ir.Tensor{"out0": g}
	}
	ref := map[string]*ir.Tensor{"out0": want}
	assert.NoError(t, compareAll(body, perturbed(3999, want.F64[3999]*(1+1e-4)), ref, "the naive program"))
	err = compareAll(body, perturbed(3999, 2), ref, "the naive program")
	assert.ErrorContains(t, err, "output out0 differs from the naive program: relative L2 error")
	assert.ErrorContains(t, err, "at most 0.0001 for f32")
	err = compareAll(body, perturbed(17, math.NaN()), ref, "the naive program")
	assert.ErrorContains(t, err, "element 17 is NaN")
	assert.ErrorContains(t, compareAll(body, map[string]*ir.Tensor{}, ref, "the naive program"), "missing")
	assert.InDelta(t, 64*ir.BF16.Eps(), RelativeLimit(ir.BF16), 0)
}
