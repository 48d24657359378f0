package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/internal/fakecuda"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/plan"
	"github.com/lumsearch/lumsearch/tunedb"
)

// TestBenchWithoutGPU: --measure gpu on a machine without a GPU (no
// driver, or a driver without a device) fails at once, before compiling
// anything, with an error that says so and names the way out; a bad
// --measure is a usage error.
func TestBenchWithoutGPU(t *testing.T) {
	t.Setenv(tunedb.EnvPath, filepath.Join(t.TempDir(), "tunedb.jsonl"))
	for _, d := range noGPUDrivers {
		t.Run(d.name, func(t *testing.T) {
			d.setup(t)
			r := runArgs(t, "bench", "tiny-llama:mlp", "--seq", "4")
			assert.Equal(t, exitError, r.code)
			assert.Contains(t, r.stderr, "--measure gpu: no CUDA device: ")
			assert.Contains(t, r.stderr, d.want)
			assert.Contains(t, r.stderr, "--measure emulated runs both programs under the CPU emulation instead")
			assert.Empty(t, r.stdout)
		})
	}
	r := runArgs(t, "bench", "tiny-llama:mlp", "--measure", "tpu")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, `--measure "tpu": gpu or emulated`)
	r = runArgs(t, "bench")
	assert.Equal(t, exitUsage, r.code)
}

// benchJSON is the part of bench's JSON object the tests read.
type benchJSON struct {
	Model   string  `json:"model"`
	Where   string  `json:"where"`
	MS      float64 `json:"ms"`
	NaiveMS float64 `json:"naive_ms"`
	Speedup float64 `json:"speedup"`
	// Predicted is the cost model's time per run (the plan's, for a DIR).
	Predicted float64 `json:"predicted_ms"`
	Runs      int     `json:"runs"`
	RelLimit  float64 `json:"relative_limit"`
	Checked   int     `json:"checked_elements"`
	Kernels   []struct {
		Launch, Kernel, Schedule string
		Predicted                float64 `json:"predicted_ms"`
		MS                       float64 `json:"median_ms"`
		Runs                     int     `json:"runs"`
	} `json:"kernels"`
	TuneDB   string `json:"tunedb"`
	Recorded int    `json:"recorded"`
}

func needGxx(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("the CPU emulation needs g++:", err)
	}
}

// benchEmulated runs bench --measure emulated --json on target with a
// small time cap and returns the parsed object.
func benchEmulated(t *testing.T, db string, args ...string) benchJSON {
	t.Helper()
	args = append([]string{"bench"}, args...)
	r := runArgs(t, append(args, "--measure", "emulated", "--json", "--tunedb", db, "--min-runs", "3", "--max-time", "200ms")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	var got benchJSON
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	require.NoError(t, dec.Decode(&got), r.stdout)
	assert.False(t, dec.More(), "exactly one JSON object: %s", r.stdout)
	assert.Equal(t, 1, strings.Count(r.stdout, `"ms":`), "one \"ms\", the one scripts/gpu-check.sh reads")
	return got
}

// TestBenchEmulatedJSON: under the emulation both programs run, agree,
// are timed (at least --min-runs runs each) and their times are labelled
// emulated in the JSON and in the tuning database, one record per
// distinct kernel, kept apart from GPU records.
func TestBenchEmulatedJSON(t *testing.T) {
	needGxx(t)
	t.Setenv(tunedb.EnvPath, filepath.Join(t.TempDir(), "default.jsonl"))
	db := filepath.Join(t.TempDir(), "tunedb.jsonl")
	got := benchEmulated(t, db, "tiny-llama:mlp", "--seq", "4")
	assert.Equal(t, "tiny-llama:mlp", got.Model)
	assert.Equal(t, "emulated", got.Where)
	assert.Positive(t, got.MS)
	assert.Positive(t, got.NaiveMS)
	assert.InDelta(t, got.NaiveMS/got.MS, got.Speedup, 1e-9)
	assert.GreaterOrEqual(t, got.Runs, 3)
	assert.Equal(t, 1e-4, got.RelLimit)
	assert.Positive(t, got.Checked)
	require.NotEmpty(t, got.Kernels)
	kernels := map[string]bool{}
	for _, k := range got.Kernels {
		assert.NotEmpty(t, k.Schedule, k.Launch)
		assert.Positive(t, k.Predicted, k.Launch)
		assert.Positive(t, k.MS, k.Launch)
		assert.GreaterOrEqual(t, k.Runs, 3, k.Launch)
		kernels[k.Kernel] = true
	}
	assert.Equal(t, db, got.TuneDB)
	assert.Equal(t, len(kernels), got.Recorded)

	d, err := tunedb.Open(db)
	require.NoError(t, err)
	recs := d.Records()
	require.Len(t, recs, len(kernels))
	for _, r := range recs {
		require.NoError(t, r.Validate())
		assert.Equal(t, tunedb.WhereEmulated, r.Where)
		_, err := ir.Parse(r.Key.Spec)
		assert.NoError(t, err, "the spec is a launch body in ir text")
		assert.Equal(t, tunedb.WhereEmulated, r.Key.Device)
		assert.Contains(t, r.Key.Shapes, "->")
		assert.Positive(t, r.Predicted)
		_, isGPU := d.Lookup(r.Key)
		assert.False(t, isGPU, "an emulated time never passes for a GPU time")
	}
	def, err := tunedb.Open(os.Getenv(tunedb.EnvPath))
	require.NoError(t, err)
	assert.Zero(t, def.Len(), "--tunedb, not the default database, got the records")
}

// TestBenchDir: bench DIR runs the program DIR holds (plan.json's launches,
// whose kernels must print DIR/kernels.cu); once a kernel in kernels.cu is
// edited it refuses, and model flags are refused with a DIR.
func TestBenchDir(t *testing.T) {
	needGxx(t)
	t.Setenv(tunedb.EnvPath, filepath.Join(t.TempDir(), "default.jsonl"))
	dir := filepath.Join(t.TempDir(), "out")
	r := runArgs(t, "compile", "tiny-llama:mlp", "--seq", "4", "--verify=false", "-o", dir)
	require.Equal(t, exitOK, r.code, r.stderr)
	db := filepath.Join(t.TempDir(), "tunedb.jsonl")
	got := benchEmulated(t, db, dir)
	assert.Equal(t, "tiny-llama:mlp", got.Model)
	assert.Positive(t, got.MS)
	assert.Positive(t, got.Recorded)

	r = runArgs(t, "bench", dir, "--seq", "8", "--measure", "emulated")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, "--seq applies to a MODEL")

	assert.Positive(t, got.Predicted, "the plan's predictions")
	path := filepath.Join(dir, "kernels.cu")
	src, err := os.ReadFile(path)
	require.NoError(t, err)
	edited := strings.Replace(string(src), "__syncthreads();", "__syncthreads(); __syncthreads();", 1)
	require.NotEqual(t, string(src), edited)
	require.NoError(t, os.WriteFile(path, []byte(edited), 0o644))
	r = runArgs(t, "bench", dir, "--measure", "emulated", "--json", "--tunedb", db)
	assert.Equal(t, exitError, r.code)
	assert.Contains(t, r.stderr, "kernels.cu was changed", "the digests catch the edit")
	assert.Empty(t, r.stdout)
	// Written back with fresh digests, the edit is caught by printing
	// each kernel again.
	reseal(t, dir, func(*plan.Plan) {})
	r = runArgs(t, "bench", dir, "--measure", "emulated", "--json", "--tunedb", db)
	assert.Equal(t, exitError, r.code)
	assert.Contains(t, r.stderr, "is not what its body and schedule")
	assert.Empty(t, r.stdout)
}

// TestBenchOnFakeDriver runs bench --measure gpu on the fake driver, which
// computes nothing (every output reads back as the zeros it was allocated
// with, so the check against the naive program passes trivially here and
// means something only on a GPU). What it shows is the wiring: both
// programs compiled by NVRTC and loaded, each whole run captured once and
// replayed as a graph (two warm-ups, then --min-runs timed replays after
// an L2 flush each, the fake's steady 1.5 ms stopping the loop there), the
// launches timed one by one, and GPU records with the device, driver and
// compiler in the tuning database.
func TestBenchOnFakeDriver(t *testing.T) {
	if _, err := nvrtc.Load(); err != nil {
		t.Skip(err)
	}
	f := fakecuda.Build(t)
	t.Setenv(tunedb.EnvPath, filepath.Join(t.TempDir(), "default.jsonl"))
	db := filepath.Join(t.TempDir(), "tunedb.jsonl")
	r := runArgs(t, "bench", "tiny-llama:mlp", "--seq", "4", "--json", "--tunedb", db, "--min-runs", "3")
	require.Equal(t, exitOK, r.code, r.stderr)
	var got benchJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got), r.stdout)
	assert.Equal(t, "gpu", got.Where)
	assert.InDelta(t, 1.5, got.MS, 1e-9)
	assert.InDelta(t, 1.5, got.NaiveMS, 1e-9)
	assert.Equal(t, 3, got.Runs)
	require.NotEmpty(t, got.Kernels)
	for _, k := range got.Kernels {
		assert.InDelta(t, 1.5, k.MS, 1e-9, k.Launch)
		assert.Equal(t, 3, k.Runs, k.Launch)
	}
	log := f.Log()
	assert.Equal(t, 2, strings.Count(log, "load \x7fELF"), "two CUBINs: the compiled and the naive program")
	assert.Equal(t, 5, strings.Count(log, fmt.Sprintf("graph launch %d kernels stream=s\n", len(got.Kernels))), "the compiled program's graph: 2 warm-ups and 3 timed")
	assert.Equal(t, 10, strings.Count(log, "graph launch"), "and the naive program's")
	assert.Equal(t, 3+3+3, strings.Count(log, "memset 2097152\n"), "an L2 flush before every timed run")

	d, err := tunedb.Open(db)
	require.NoError(t, err)
	require.NotZero(t, d.Len())
	assert.Equal(t, got.Recorded, d.Len())
	for _, rec := range d.Records() {
		require.NoError(t, rec.Validate())
		assert.Equal(t, tunedb.WhereGPU, rec.Where)
		assert.Equal(t, "Fake GPU", rec.Key.Device)
		assert.Equal(t, "12.4", rec.Key.Driver)
		assert.True(t, strings.HasPrefix(rec.Key.Compiler, "nvrtc "), rec.Key.Compiler)
	}
}

// TestMain sets up what the tests share (setupShared) and removes it and
// the fake driver's folder after the tests.
func TestMain(m *testing.M) {
	// The test binary stands in for lumsearch itself where a test runs
	// it as a process (optimize's Ctrl-C test, the measuring worker).
	if os.Getenv(asMainEnv) == "1" {
		slowWrites()
		main()
		return
	}
	cleanup, err := setupShared()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cmd/lumsearch tests:", err)
		os.Exit(1)
	}
	code := m.Run()
	cleanup()
	fakecuda.Cleanup()
	os.Exit(code)
}

// TestBenchCompareKernels: bench DIR --compare-kernels through the fake
// driver, which computes nothing: every kernel of the folder disagrees
// (its outputs never written on the "GPU"), the table and the JSON say so
// kernel by kernel and the exit status is 1. Without a GPU it fails and
// says so; flags that do not apply are usage errors.
func TestBenchCompareKernels(t *testing.T) {
	needGxx(t)
	dir, _ := compiledDecode(t)
	t.Run("usage", func(t *testing.T) {
		tests := []struct {
			name string
			args []string
			want string
		}{
			{"emulated", []string{dir, "--compare-kernels", "--measure", "emulated"}, "--measure emulated: not with --compare-kernels"},
			{"save", []string{dir, "--compare-kernels", "--save", t.TempDir()}, "--save: not with --compare-kernels"},
			{"model", []string{"tiny-llama:mlp", "--compare-kernels"}, "--compare-kernels takes a folder that compile or optimize wrote"},
			{"budget alone", []string{dir, "--budget", "1m"}, "--budget applies to --compare-kernels"},
			{"negative budget", []string{dir, "--compare-kernels", "--budget", "-1s"}, "--budget -1s: want a positive duration"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				r := runArgs(t, append([]string{"bench"}, tc.args...)...)
				assert.Equal(t, exitUsage, r.code, r.stderr)
				assert.Contains(t, r.stderr, tc.want)
				assert.Empty(t, r.stdout)
			})
		}
	})
	for _, d := range noGPUDrivers {
		t.Run(d.name, func(t *testing.T) {
			d.setup(t)
			r := runArgs(t, "bench", dir, "--compare-kernels")
			assert.Equal(t, exitError, r.code)
			assert.Contains(t, r.stderr, "compare kernels of "+dir+" on a GPU: no CUDA device: ")
			assert.Contains(t, r.stderr, d.want)
			assert.Empty(t, r.stdout)
		})
	}
	if _, err := nvrtc.Load(); err != nil {
		t.Skip("the folder embeds a module only when NVRTC compiled it:", err)
	}
	t.Run("fake driver", func(t *testing.T) {
		f := fakecuda.Build(t)
		r := runArgs(t, "bench", dir, "--compare-kernels", "--budget", "5m")
		assert.Equal(t, exitError, r.code, r.stderr)
		assert.Contains(t, r.stdout, "compare kernels of "+dir+" ("+decodeModel+") on Fake GPU (the sm_90 CUBIN model.cpp embeds) with the CPU emulation, seed 1\n")
		assert.Regexp(t, `(?m)^KERNEL +SCHEDULE +RUNS +ELEMENTS +GPU ERR +EMU ERR +GPU-EMU +RESULT$`, r.stdout)
		rows := regexp.MustCompile(`(?m)^(\S+) +\S+ +\S+ +\d+ .*inf +\S+ +inf +FAIL \(GPU\)$`).FindAllStringSubmatch(r.stdout, -1)
		require.NotEmpty(t, rows, r.stdout)
		for _, row := range rows {
			assert.Contains(t, r.stdout, row[1]+" on the GPU: verify kernel "+row[1]+" on the device: output ")
		}
		assert.Contains(t, r.stdout, fmt.Sprintf("verdict: DISAGREE: %d of %d kernels fail (", len(rows), len(rows)))
		assert.Contains(t, r.stderr, "the kernels on the GPU and under the emulation: DISAGREE: ")
		assert.Equal(t, 1, strings.Count(f.Log(), "load \x7fELF"), "the embedded CUBIN, loaded once")
		assert.Zero(t, f.Allocs(), "every buffer freed")

		r = runArgs(t, "bench", dir, "--compare-kernels", "--json", "--seed", "3")
		assert.Equal(t, exitError, r.code, r.stderr)
		var got struct {
			Device  string `json:"device"`
			Seed    uint64 `json:"seed"`
			OK      bool   `json:"ok"`
			Verdict string `json:"verdict"`
			Kernels []struct {
				Kernel string   `json:"kernel"`
				GPU    *float64 `json:"gpu_error_ratio"`
				OK     bool     `json:"ok"`
				Error  string   `json:"error"`
			} `json:"kernels"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &got), r.stdout)
		assert.Equal(t, "Fake GPU", got.Device)
		assert.Equal(t, uint64(3), got.Seed)
		assert.False(t, got.OK)
		assert.True(t, strings.HasPrefix(got.Verdict, "DISAGREE: "), got.Verdict)
		require.Len(t, got.Kernels, len(rows))
		for _, k := range got.Kernels {
			assert.False(t, k.OK, k.Kernel)
			assert.Nil(t, k.GPU, "%s: an infinite ratio is null", k.Kernel)
			assert.Contains(t, k.Error, "never written", k.Kernel)
		}
	})
}
