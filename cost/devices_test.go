package cost

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBuiltinDevicesValidate(t *testing.T) {
	ds := Devices()
	require.Len(t, ds, 6)
	for _, d := range ds {
		t.Run(d.Name, func(t *testing.T) {
			require.NoError(t, d.Validate())
			require.NoError(t, check(d))
			assert.NotEmpty(t, d.FullName)
			assert.NotEmpty(t, d.Source)
			assert.NotEmpty(t, d.MemorySource)
			assert.NotEmpty(t, d.LaunchSource)
			assert.Positive(t, d.MemoryBytes)
			assert.Positive(t, d.L2Bytes)
			assert.Positive(t, d.BoostClockMHz)
			assert.LessOrEqual(t, d.SharedPerBlock, d.SharedPerSM)
			for _, dt := range []string{"f16", "bf16", "tf32", "i8"} {
				p, ok := d.Peak(MMA, dt)
				require.True(t, ok, "mma.sync %s", dt)
				assert.NotEmpty(t, p.Source)
			}
			_, hasWGMMA := d.Peak(WGMMA, "bf16")
			assert.Equal(t, d.Arch == "sm_90", hasWGMMA, "wgmma exactly on Hopper")
			for _, p := range d.Peaks {
				// Peaks are dense: tensor peaks are far above FP32 but under 40x it.
				f32, _ := d.Peak(FMA, "f32")
				assert.LessOrEqual(t, p.FLOPS, 40*f32.FLOPS, "%s %s", p.Class, p.DType)
				assert.Contains(t, p.Source, "estimate", "achievable fractions are estimates until calibrated")
			}
		})
	}
}

func TestDevicesAreCopies(t *testing.T) {
	a := Devices()
	a[0].SMs = 1
	a[0].Peaks[0].FLOPS = 1
	b := Devices()
	assert.NotEqual(t, 1, b[0].SMs)
	assert.NotEqual(t, 1.0, b[0].Peaks[0].FLOPS)
}

func TestLookupDevice(t *testing.T) {
	tests := []struct{ name, want string }{
		{"h100-sxm", "h100-sxm"},
		{"h100", "h100-sxm"},
		{"H100", "h100-sxm"},
		{"h200", "h200-sxm"},
		{"H200-SXM", "h200-sxm"},
		{"a100", "a100-sxm-80gb"},
		{"l40s", "l40s"},
		{"L40S", "l40s"},
		{"4090", "rtx-4090"},
		{"rtx4090", "rtx-4090"},
		{"RTX-4090", "rtx-4090"},
		{"a10g", "a10g"},
		{" a10g ", "a10g"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := LookupDevice(tt.name)
			require.NoError(t, err)
			assert.Equal(t, tt.want, d.Name)
		})
	}
	for _, bad := range []string{"", "h300", "a100-40gb"} {
		_, err := LookupDevice(bad)
		require.Error(t, err, bad)
		assert.Contains(t, err.Error(), "h100-sxm")
		assert.Contains(t, err.Error(), "a10g")
	}
}

// TestDeviceNumbers pins the key numbers against the datasheets.
func TestDeviceNumbers(t *testing.T) {
	tests := []struct {
		name       string
		sms        int
		bandwidth  float64
		bf16, f32  float64
		memoryFrac float64
	}{
		{"h100-sxm", 132, 3.35e12, 989.4e12, 66.9e12, 0.90},
		{"h200-sxm", 132, 4.8e12, 989.4e12, 66.9e12, 4.3 / 4.8},
		{"a100-sxm-80gb", 108, 2.039e12, 312e12, 19.5e12, 0.90},
		{"l40s", 142, 864e9, 362.05e12, 91.6e12, 0.90},
		{"rtx-4090", 128, 1008e9, 165.2e12, 82.6e12, 0.90},
		{"a10g", 80, 600e9, 70e12, 35e12, 0.90},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := LookupDevice(tt.name)
			require.NoError(t, err)
			assert.Equal(t, tt.sms, d.SMs)
			assert.InEpsilon(t, tt.bandwidth, d.MemoryBandwidth, 1e-9)
			assert.InEpsilon(t, tt.memoryFrac, d.MemoryAchievable, 1e-9)
			p, _ := d.Peak(MMA, "bf16")
			assert.InEpsilon(t, tt.bf16, p.FLOPS, 1e-9)
			p, _ = d.Peak(FMA, "f32")
			assert.InEpsilon(t, tt.f32, p.FLOPS, 1e-9)
		})
	}
}

// TestH200Copy is the hand calculation of the issue: a 1 GiB device-to-device
// copy (2 GiB moved) on H200 predicts within 10% of 2 GiB / 4.3 TB/s.
func TestH200Copy(t *testing.T) {
	d, err := LookupDevice("h200")
	require.NoError(t, err)
	got, err := Predict(d, Defaults(d), Features{Bytes: 2 << 30, Blocks: 132 * 8, PerSM: 8, Launches: 1})
	require.NoError(t, err)
	want := float64(2<<30) / 4.3e12
	assert.InEpsilon(t, want, got, 0.10)
	assert.Contains(t, d.MemorySource, "4.3")
}

// TestMatmulComputeTime: an 8192^3 bf16 matmul on mma.sync predicts its
// FLOPs at the peak times the stated achievable fraction.
func TestMatmulComputeTime(t *testing.T) {
	const n = 8192
	flops := 2.0 * n * n * n
	for _, d := range Devices() {
		t.Run(d.Name, func(t *testing.T) {
			p, ok := d.Peak(MMA, "bf16")
			require.True(t, ok)
			require.NotEmpty(t, p.Source)
			x := Features{
				Bytes:    1 << 20, // small: compute dominates
				Work:     []Work{{Class: MMA, DType: "bf16", FLOPs: flops}},
				Launches: 1,
			}
			got, err := Predict(d, Defaults(d), x)
			require.NoError(t, err)
			want := flops / (p.FLOPS * p.Achievable)
			assert.InEpsilon(t, want, got-d.Launch, 1e-12)
		})
	}
	d, _ := LookupDevice("h100")
	p, _ := d.Peak(MMA, "bf16")
	t.Logf("h100-sxm 8192^3 bf16 on mma.sync: %.3f ms at %.0f%% of %.1f TFLOPS (%s)",
		flops/(p.FLOPS*p.Achievable)*1e3, p.Achievable*100, p.FLOPS/1e12, p.Source)
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	return path
}

// userDevice is a valid device file entry, with extra JSON fields spliced in.
func userDevice(name string, sms int, extra string) string {
	return fmt.Sprintf(`{
  "name": %q, "aliases": ["my-gpu-alias-%s"], "full_name": "ACME %s", "arch": "sm_90",%s
  "sms": %d, "boost_clock_mhz": 1500,
  "memory_bytes": 1000, "memory_bandwidth": 1e12, "memory_achievable": 0.8, "memory_source": "measured",
  "l2_bytes": 100, "shared_per_sm": 1000, "shared_per_block": 1000, "registers_per_sm": 65536, "registers_per_block": 65536,
  "max_threads_per_sm": 2048, "max_blocks_per_sm": 32, "launch_seconds": 2e-6, "launch_source": "measured",
  "peaks": [{"class": "fma", "dtype": "f32", "flops": 1e13, "achievable": 0.5, "source": "measured"}]
}`, name, name, name, extra, sms)
}

func TestLoadDevices(t *testing.T) {
	path := writeFile(t, "mine.json", "["+userDevice("my-gpu", 10, "")+","+userDevice("h100-sxm", 7, "")+"]")
	ds, err := LoadDevices(path)
	require.NoError(t, err)
	require.Len(t, ds, 2)
	assert.Equal(t, "my-gpu", ds[0].Name)
	assert.Equal(t, 7, ds[1].SMs)

	tests := []struct {
		name, content string
		want          []string // in the error, besides the file name
	}{
		{"unknown field", "[" + userDevice("my-gpu", 10, ` "smz": 3,`) + "]", []string{"device 1 (my-gpu)", `unknown field "smz"`}},
		{"unknown peak field", "[" + strings.Replace(userDevice("my-gpu", 10, ""), `"achievable": 0.5`, `"achievable": 0.5, "sparse": true`, 1) + "]",
			[]string{"device 1 (my-gpu)", `unknown field "sparse"`}},
		{"wrong type", "[" + userDevice("a", 1, "") + "," + strings.Replace(userDevice("b", 1, ""), `"sms": 1`, `"sms": "many"`, 1) + "]",
			[]string{"device 2 (b)", "sms"}},
		{"invalid", "[" + userDevice("my-gpu", 0, "") + "]", []string{"device 1 (my-gpu)", "sms must be positive"}},
		{"bad class", "[" + strings.Replace(userDevice("my-gpu", 1, ""), `"peaks": [`, `"peaks": [{"class": "tcgen05", "dtype": "f16", "flops": 1, "achievable": 1, "source": "x"},`, 1) + "]",
			[]string{"device 1 (my-gpu)", "tcgen05"}},
		{"duplicate", "[" + userDevice("my-gpu", 1, "") + "," + userDevice("my-gpu", 2, "") + "]", []string{"device 2 (my-gpu)", "also my-gpu's"}},
		{"not a list", userDevice("my-gpu", 1, ""), []string{"list of devices"}},
		{"trailing", "[" + userDevice("my-gpu", 1, "") + "] []", []string{"after the JSON value"}},
		{"empty", "[]", []string{"no devices"}},
		{"syntax", "[{", []string{"list of devices"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, "bad-devices.json", tt.content)
			_, err := LoadDevices(path)
			require.Error(t, err)
			assert.Contains(t, err.Error(), path)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
	_, err = LoadDevices(filepath.Join(t.TempDir(), "missing.json"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "missing.json")
}

func TestResolveTarget(t *testing.T) {
	ctx := context.Background()
	user := writeFile(t, "mine.json", "["+userDevice("my-gpu", 10, "")+","+userDevice("h100-sxm", 7, "")+"]")

	d, err := ResolveTarget(ctx, "h100", nil)
	require.NoError(t, err)
	assert.Equal(t, 132, d.SMs)

	d, err = ResolveTarget(ctx, "h100-sxm", []string{user})
	require.NoError(t, err)
	assert.Equal(t, 7, d.SMs, "a user entry with a built-in's name overrides it")

	d, err = ResolveTarget(ctx, "MY-GPU", []string{user})
	require.NoError(t, err)
	assert.Equal(t, "my-gpu", d.Name)
	d, err = ResolveTarget(ctx, "my-gpu-alias-my-gpu", []string{user})
	require.NoError(t, err)
	assert.Equal(t, "my-gpu", d.Name)

	_, err = ResolveTarget(ctx, "my-gpu", nil)
	require.Error(t, err)
	_, err = ResolveTarget(ctx, "h100", []string{filepath.Join(t.TempDir(), "nope.json")})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nope.json")

	// The override does not leak into the built-ins.
	d, err = LookupDevice("h100-sxm")
	require.NoError(t, err)
	assert.Equal(t, 132, d.SMs)
}

// fakeSMI replaces the command runner for one test.
func fakeSMI(t *testing.T, out string, err error) *[]string {
	t.Helper()
	old := runCommand
	var called []string
	runCommand = func(ctx context.Context, name string, args ...string) ([]byte, error) {
		called = append([]string{name}, args...)
		return []byte(out), err
	}
	t.Cleanup(func() { runCommand = old })
	return &called
}

func TestResolveTargetAuto(t *testing.T) {
	ctx := context.Background()
	user := writeFile(t, "mine.json", "["+userDevice("my-gpu", 10, "")+"]")
	tests := []struct {
		name, out string
		files     []string
		want      string
	}{
		{"h100", "NVIDIA H100 80GB HBM3, 9.0\n", nil, "h100-sxm"},
		{"eight h200", strings.Repeat("NVIDIA H200, 9.0\n", 8), nil, "h200-sxm"},
		{"a100", "NVIDIA A100-SXM4-80GB, 8.0\n", nil, "a100-sxm-80gb"},
		{"l40s", "NVIDIA L40S, 8.9\n", nil, "l40s"},
		{"4090 crlf", "NVIDIA GeForce RTX 4090, 8.9\r\n", nil, "rtx-4090"},
		{"a10g", "NVIDIA A10G, 8.6\n", nil, "a10g"},
		{"user", "ACME my-gpu, 9.0\n", []string{user}, "my-gpu"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			called := fakeSMI(t, tt.out, nil)
			d, err := ResolveTarget(ctx, "auto", tt.files)
			require.NoError(t, err)
			assert.Equal(t, tt.want, d.Name)
			assert.Equal(t, []string{"nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"}, *called)
		})
	}

	errs := []struct {
		name, out string
		err       error
		want      []string
	}{
		{"no nvidia-smi", "", &exec.Error{Name: "nvidia-smi", Err: exec.ErrNotFound},
			[]string{"--target auto: no NVIDIA GPU found (nvidia-smi:", "executable file not found", "name a target: h100-sxm"}},
		{"no gpu", "", errors.New("exit status 6: No devices were found"),
			[]string{"--target auto: no NVIDIA GPU found", "No devices were found", "name a target: h100-sxm"}},
		{"empty output", "\n", nil, []string{"no NVIDIA GPU found", "listed none"}},
		{"unknown gpu", "NVIDIA H100 PCIe, 9.0\n", nil, []string{`"NVIDIA H100 PCIe"`, "compute capability 9.0", "device file"}},
		{"mixed", "NVIDIA H100 80GB HBM3, 9.0\nNVIDIA A10G, 8.6\n", nil, []string{"different models", "NVIDIA A10G"}},
		{"wrong arch", "NVIDIA L40S, 9.0\n", nil, []string{"compute capability 9.0", "sm_89"}},
	}
	for _, tt := range errs {
		t.Run(tt.name, func(t *testing.T) {
			fakeSMI(t, tt.out, tt.err)
			_, err := ResolveTarget(ctx, "auto", nil)
			require.Error(t, err)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

// TestRunCommandMissing runs the real runner on a command that does not
// exist: the error is what --target auto reports without nvidia-smi.
func TestRunCommandMissing(t *testing.T) {
	_, err := runCommand(context.Background(), "lumsearch-no-such-command-xyz")
	require.Error(t, err)
	assert.ErrorIs(t, err, exec.ErrNotFound)
}

func TestArchOf(t *testing.T) {
	for cc, want := range map[string]string{"9.0": "sm_90", "8.6": "sm_86", "[N/A]": "", "": "", "x.y": ""} {
		assert.Equal(t, want, archOf(cc), cc)
	}
}

// TestExampleUserFile: testdata/h100-pcie.json is an example of a user
// device file; with it, --target auto recognises an H100 PCIe.
func TestExampleUserFile(t *testing.T) {
	const path = "testdata/h100-pcie.json"
	ds, err := LoadDevices(path)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	assert.Equal(t, 114, ds[0].SMs)

	fakeSMI(t, "NVIDIA H100 PCIe, 9.0\n", nil)
	_, err = ResolveTarget(context.Background(), "auto", nil)
	require.Error(t, err, "no built-in description for the PCIe card")
	d, err := ResolveTarget(context.Background(), "auto", []string{path})
	require.NoError(t, err)
	assert.Equal(t, "h100-pcie", d.Name)
	d, err = ResolveTarget(context.Background(), "h100", []string{path})
	require.NoError(t, err)
	assert.Equal(t, "h100-sxm", d.Name, "the built-in alias still names the SXM part")
}
