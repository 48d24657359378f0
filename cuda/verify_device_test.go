package cuda

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// emulatedDevice is EmulatedDevice with its outputs given to edit, when
// set, which returns the outputs to give back or an error.
func emulatedDevice(ks []*Kernel, cache string, edit func(l DeviceLaunch, outs [][]byte) ([][]byte, error)) DeviceRunner {
	run := EmulatedDevice(ks, emu.Options{CacheDir: cache})
	return func(ctx context.Context, l DeviceLaunch) ([][]byte, error) {
		outs, err := run(ctx, l)
		if err != nil || edit == nil {
			return outs, err
		}
		return edit(l, outs)
	}
}

// setF32 sets element i of a buffer of f32 values.
func setF32(b []byte, i int, v float32) {
	binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
}

// TestCompareKernels compares kernels (a whole run, an output written
// through a window, a row reduction, and an attention over a KV cache
// whose runtime position gives it three runs) with made-up devices: one
// that computes what the emulation does passes, whole or sampled; one
// element changed beyond the allowance fails its kernel alone, naming the
// kernel and the element (at every runtime position for the attention);
// a device that computes nothing, leaving the outputs as they were given,
// fails every kernel with every element never written; a device that
// fails one launch fails that kernel alone.
func TestCompareKernels(t *testing.T) {
	needGXX(t)
	eb := elementwiseBodies(t)
	var ks []*Kernel
	var gs []*ir.Graph
	for _, name := range []string{"silu_mul", "kv_update", "softmax"} {
		k, err := PrintKernel(name, "compared kernel "+name, eb[name])
		require.NoError(t, err, name)
		ks, gs = append(ks, k), append(gs, eb[name])
	}
	att := boundCase{name: "decode", dt: ir.F32, mask: boundOp, heads: 4, kvHeads: 2, s: 1, tk: 40, d: 16}.body(t)
	k, err := PrintKernel("decode", "compared kernel decode", att)
	require.NoError(t, err)
	ks, gs = append(ks, k), append(gs, att)
	cache := t.TempDir()
	nothing := func(l DeviceLaunch, _ [][]byte) ([][]byte, error) {
		return l.Args[len(l.Args)-l.Outputs:], nil
	}
	changed := map[string]int{"silu_mul": 3, "decode": 0}
	change := func(l DeviceLaunch, outs [][]byte) ([][]byte, error) {
		if i, ok := changed[l.Kernel]; ok {
			v := math.Float32frombits(binary.LittleEndian.Uint32(outs[0][4*i:]))
			setF32(outs[0], i, 1000*v+1000)
		}
		return outs, nil
	}
	fail := func(l DeviceLaunch, outs [][]byte) ([][]byte, error) {
		if l.Kernel == "softmax" {
			return nil, errors.New("CUDA_ERROR_LAUNCH_FAILED")
		}
		return outs, nil
	}
	tests := []struct {
		name string
		opt  VerifyOptions
		edit func(DeviceLaunch, [][]byte) ([][]byte, error)
		// failing maps the kernels that fail to what their device
		// error says.
		failing map[string][]string
		sampled bool
	}{
		{name: "equal", opt: VerifyOptions{Seed: 1}},
		{name: "equal sampled", opt: VerifyOptions{Seed: 2, MaxElements: 1, MaxBlocks: 2}, sampled: true},
		{name: "one element changed", opt: VerifyOptions{Seed: 3}, edit: change, failing: map[string][]string{
			"silu_mul": {"verify kernel silu_mul on the device: output out0 (parameter out0, f32[", "element 3 [", "got "},
			"decode": {"verify kernel decode on the device: output out0", "element 0 [0,0,0,0]",
				"(its runtime position at the lowest of its range)", "(its runtime position at the highest of its range)"},
		}},
		{name: "nothing computed", opt: VerifyOptions{Seed: 4}, edit: nothing, failing: map[string][]string{
			"silu_mul":  {"verify kernel silu_mul on the device: output out0", "element 0 [0,0] never written"},
			"kv_update": {"verify kernel kv_update on the device: output out0", "never written"},
			"softmax":   {"verify kernel softmax on the device: output out0", "never written"},
			"decode":    {"verify kernel decode on the device: output out0", "never written"},
		}},
		{name: "launch fails", opt: VerifyOptions{Seed: 5}, edit: fail, failing: map[string][]string{
			"softmax": {"verify kernel softmax on the device: CUDA_ERROR_LAUNCH_FAILED"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.opt.Emu.CacheDir = cache
			cs, err := CompareKernels(context.Background(), ks, gs, tc.opt, emulatedDevice(ks, cache, tc.edit))
			require.NoError(t, err)
			require.Len(t, cs, len(ks))
			for i, c := range cs {
				name := ks[i].Name
				t.Logf("%s: %d runs, %d elements, device %.3g, emulation %.3g, difference %.3g of the allowance",
					name, c.Runs, c.Elements, c.DeviceRatio, c.EmulationRatio, c.Difference)
				assert.Equal(t, name, c.Kernel)
				assert.Equal(t, ks[i].Schedule.String(), c.Schedule)
				assert.NoError(t, c.Emulation, "%s passes under the emulation", name)
				assert.LessOrEqual(t, c.EmulationRatio, 1.0, name)
				if tc.name != "launch fails" || name != "softmax" {
					assert.Positive(t, c.Elements, name)
				}
				planned := 1
				if name == "decode" {
					planned = 3 // a random position and both ends of its range
				}
				assert.Equal(t, planned, c.Planned, name)
				assert.Equal(t, planned, c.Runs, name)
				if tc.sampled {
					assert.Equal(t, ks[i].Grid[0]*ks[i].Grid[1]*ks[i].Grid[2] > 2, c.Sampled, name)
				}
				want, fails := tc.failing[name]
				if !fails {
					assert.True(t, c.OK(), "%s: %v", name, c.Device)
					assert.LessOrEqual(t, c.DeviceRatio, 1.0, name)
					assert.LessOrEqual(t, c.Difference, 1.0, name)
					continue
				}
				assert.False(t, c.OK(), name)
				require.Error(t, c.Device, name)
				for _, s := range want {
					assert.Contains(t, c.Device.Error(), s, name)
				}
				if tc.name == "launch fails" {
					continue
				}
				var mm *KernelMismatch
				require.ErrorAs(t, c.Device, &mm, name)
				assert.Equal(t, name, mm.Kernel)
				assert.Equal(t, "device", mm.Where)
				assert.Greater(t, c.DeviceRatio, 1.0, name)
				require.NotNil(t, c.DifferenceAt, name)
				if tc.name == "one element changed" {
					assert.Equal(t, int64(changed[name]), mm.Index, name)
					assert.Zero(t, mm.NeverWritten, name)
					assert.Greater(t, c.Difference, 1.0, "%s: the device's element is far from the emulation's", name)
					assert.Equal(t, int64(changed[name]), c.DifferenceAt.Index, name)
				} else {
					assert.Positive(t, mm.NeverWritten, name)
					assert.True(t, math.IsInf(c.DeviceRatio, 1), name)
					assert.True(t, math.IsInf(c.Difference, 1), name)
				}
			}
		})
	}
}

// TestCompareKernelsStops: a context that ends stops the comparison; the
// kernels it did not reach come back with no run compared.
func TestCompareKernelsStops(t *testing.T) {
	needGXX(t)
	eb := elementwiseBodies(t)
	k, err := PrintKernel("silu_mul", "", eb["silu_mul"])
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cs, err := CompareKernels(ctx, []*Kernel{k}, []*ir.Graph{eb["silu_mul"]}, VerifyOptions{Seed: 1, Emu: emu.Options{CacheDir: t.TempDir()}},
		func(context.Context, DeviceLaunch) ([][]byte, error) { return nil, fmt.Errorf("not reached") })
	require.ErrorIs(t, err, context.Canceled)
	require.Len(t, cs, 1)
	assert.Equal(t, 0, cs[0].Runs)
	assert.Equal(t, 1, cs[0].Planned)
	assert.False(t, cs[0].OK())
	_, err = CompareKernels(context.Background(), []*Kernel{k}, []*ir.Graph{eb["silu_mul"]}, VerifyOptions{}, nil)
	assert.ErrorContains(t, err, "no device")
}

// TestDiffRatio: the difference between a device's element and the
// emulation's, in units of the reference's allowance.
func TestDiffRatio(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	tests := []struct {
		name         string
		dt           ir.DType
		a, b, w, mag float64
		tol, want    float64
	}{
		{"equal", ir.F32, 1.5, 1.5, 1.5, 1.5, 1e-3, 0},
		{"half the allowance", ir.F32, 2, 2.001, 2, 2, 1e-3, 0.5},
		{"magnitude widens", ir.F32, 2, 2.001, 2, 4, 1e-3, 0.25},
		{"both NaN", ir.F32, nan, nan, nan, 0, 1e-3, 0},
		{"one NaN", ir.F32, nan, 1, 1, 1, 1e-3, inf},
		{"same infinity", ir.F32, inf, inf, inf, 0, 1e-3, 0},
		{"an infinity and a number", ir.F32, inf, 1, 1, 1, 1e-3, inf},
		{"exact dtype differs", ir.I32, 3, 4, 3, 3, 0, inf},
		{"exact dtype equal", ir.I32, 3, 3, 3, 3, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := diffRatio(tc.dt, tc.a, tc.b, tc.w, tc.mag, tc.tol)
			if math.IsInf(tc.want, 1) {
				assert.True(t, math.IsInf(got, 1), "got %v", got)
				return
			}
			assert.InDelta(t, tc.want, got, 1e-9)
		})
	}
}
