package search

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/internal/fakecuda"
)

// compareJSON is the part of CompareReport's JSON the tests read.
type compareJSON struct {
	Model   string `json:"model"`
	Device  string `json:"device"`
	OK      bool   `json:"ok"`
	Verdict string `json:"verdict"`
	Kernels []struct {
		Kernel     string   `json:"kernel"`
		Runs       int      `json:"runs"`
		Elements   int64    `json:"elements"`
		GPU        *float64 `json:"gpu_error_ratio"`
		Emulation  *float64 `json:"emulation_error_ratio"`
		Difference *float64 `json:"difference_ratio"`
		OK         bool     `json:"ok"`
		Error      string   `json:"error"`
	} `json:"kernels"`
}

// TestCompareKernelsDir compares the kernels of a compiled folder on a GPU
// and under the emulation: through the fake driver, which computes nothing,
// every kernel disagrees (its outputs never written); on a made-up device
// that computes what the emulation does every kernel agrees; with one
// element of one kernel's output changed beyond the allowance that kernel
// alone disagrees, named with the element; a budget spent before the
// first kernel leaves every kernel not compared. Each report prints as a
// table and as JSON.
func TestCompareKernelsDir(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("the CPU emulation needs g++:", err)
	}
	res := compiledResult(t, "tiny-llama:mlp")
	dir := filepath.Join(t.TempDir(), "out")
	require.NoError(t, res.Write(context.Background(), dir))
	pl, err := readPlan(dir)
	require.NoError(t, err)
	src, srcPath, err := readKernelsFile(dir)
	require.NoError(t, err)
	fp, err := loadFolderProgram(dir, pl, src, srcPath)
	require.NoError(t, err)
	distinct, _ := distinctKernels(fp.lp, fp.ks)
	require.NotEmpty(t, distinct)
	exact := cuda.EmulatedDevice(distinct, emu.Options{})
	changed := distinct[len(distinct)-1].Name
	oneChanged := func(ctx context.Context, l cuda.DeviceLaunch) ([][]byte, error) {
		outs, err := exact(ctx, l)
		if err == nil && l.Kernel == changed {
			v := math.Float32frombits(binary.LittleEndian.Uint32(outs[0][4:]))
			binary.LittleEndian.PutUint32(outs[0][4:], math.Float32bits(100*v+100))
		}
		return outs, err
	}
	tests := []struct {
		name   string
		fake   bool // through the fake driver
		device cuda.DeviceRunner
		budget time.Duration
		// failing lists what each failing kernel's error says; ok
		// says every kernel agrees; incomplete that none was compared.
		failing    map[string][]string
		ok         bool
		incomplete bool
	}{
		{name: "fake driver", fake: true},
		{name: "made-up device, exact", device: exact, ok: true},
		{name: "made-up device, one element changed", device: oneChanged, failing: map[string][]string{
			changed: {"verify kernel " + changed + " on the device: output out0", "element 1 ["},
		}},
		{name: "budget spent", device: exact, budget: time.Nanosecond, incomplete: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := CompareOptions{Seed: 1, Budget: tc.budget, Device: tc.device, DeviceName: "made-up device"}
			var f *fakecuda.Driver
			if tc.fake {
				if _, err := nvrtc.Load(); err != nil {
					t.Skip("the folder embeds a module only when NVRTC compiled it:", err)
				}
				f = fakecuda.Build(t)
			}
			rep, err := CompareKernels(context.Background(), dir, o)
			require.NoError(t, err)
			require.Len(t, rep.Kernels, len(distinct))
			assert.Equal(t, "tiny-llama:mlp", rep.Model)
			var text bytes.Buffer
			require.NoError(t, rep.WriteText(&text))
			var js bytes.Buffer
			require.NoError(t, rep.WriteJSON(&js))
			var got compareJSON
			require.NoError(t, json.Unmarshal(js.Bytes(), &got), js.String())
			assert.Equal(t, rep.OK(), got.OK)
			assert.Equal(t, rep.Verdict(), got.Verdict)
			assert.Contains(t, text.String(), "verdict: "+rep.Verdict()+"\n")
			require.Len(t, got.Kernels, len(distinct))
			t.Logf("%s", text.String())
			if tc.fake {
				assert.Equal(t, "Fake GPU", rep.Device)
				assert.Contains(t, rep.Module, "CUBIN")
				log := f.Log()
				assert.Equal(t, 1, strings.Count(log, "load \x7fELF"), "the CUBIN the host library embeds, loaded once")
				assert.Equal(t, len(distinct), strings.Count(log, "launch grid="), "one launch per kernel: %s", log)
				assert.Zero(t, f.Allocs(), "every buffer freed")
				assert.False(t, rep.OK())
				assert.True(t, strings.HasPrefix(rep.Verdict(), "DISAGREE: "), rep.Verdict())
				for i, c := range rep.Kernels {
					assert.Equal(t, c.Planned, c.Runs, c.Kernel)
					assert.NoError(t, c.Emulation, c.Kernel)
					var mm *cuda.KernelMismatch
					require.ErrorAs(t, c.Device, &mm, c.Kernel)
					assert.Equal(t, c.Kernel, mm.Kernel)
					assert.Positive(t, mm.NeverWritten, c.Kernel)
					assert.True(t, math.IsInf(c.DeviceRatio, 1), c.Kernel)
					assert.Contains(t, c.Device.Error(), "verify kernel "+c.Kernel+" on the device: output")
					assert.Regexp(t, `(?m)^`+c.Kernel+` +\S+ +1 +\d+ .*inf +\S+ +inf +FAIL \(GPU\)$`, text.String())
					assert.Nil(t, got.Kernels[i].GPU, "an infinite ratio is null")
					assert.NotNil(t, got.Kernels[i].Emulation)
					assert.False(t, got.Kernels[i].OK)
					assert.Contains(t, got.Kernels[i].Error, "never written")
				}
				return
			}
			assert.Equal(t, "made-up device", rep.Device)
			assert.Equal(t, tc.ok, rep.OK())
			if tc.incomplete {
				assert.Contains(t, rep.Stopped, "budget")
				assert.True(t, strings.HasPrefix(rep.Verdict(), "incomplete: "), rep.Verdict())
				for _, c := range rep.Kernels {
					assert.Zero(t, c.Runs, c.Kernel)
					assert.Regexp(t, `(?m)^`+c.Kernel+` .* not compared$`, text.String())
				}
				return
			}
			if tc.ok {
				assert.True(t, strings.HasPrefix(rep.Verdict(), "agree: all "), rep.Verdict())
			}
			for i, c := range rep.Kernels {
				assert.Equal(t, c.Planned, c.Runs, c.Kernel)
				assert.Positive(t, c.Elements, c.Kernel)
				assert.NoError(t, c.Emulation, c.Kernel)
				want, fails := tc.failing[c.Kernel]
				assert.Equal(t, !fails, c.OK(), "%s: %v", c.Kernel, c.Device)
				assert.Equal(t, !fails, got.Kernels[i].OK, c.Kernel)
				if !fails {
					assert.LessOrEqual(t, c.DeviceRatio, 1.0, c.Kernel)
					assert.Zero(t, c.Difference, "%s: the emulation against itself", c.Kernel)
					assert.Regexp(t, `(?m)^`+c.Kernel+` .* ok$`, text.String())
					continue
				}
				require.Error(t, c.Device, c.Kernel)
				for _, s := range want {
					assert.Contains(t, c.Device.Error(), s, c.Kernel)
					assert.Contains(t, text.String(), s, c.Kernel)
				}
				assert.Greater(t, c.DeviceRatio, 1.0, c.Kernel)
				assert.Greater(t, c.Difference, 1.0, c.Kernel)
				assert.Regexp(t, `(?m)^`+c.Kernel+` .* FAIL \(GPU\)$`, text.String())
				assert.Contains(t, text.String(), c.Kernel+": largest GPU-emulation difference at output out0 element 1 ")
			}
		})
	}
}
