package cuda

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/rules"
)

// hostProgram lowers and prints the naive program of a tiny corpus graph.
func hostProgram(t *testing.T, name string) (*lower.Program, []*Kernel) {
	t.Helper()
	opt := corpus.Options{Seq: 4, Past: 2}
	if base, ok := strings.CutSuffix(name, "@runtime"); ok {
		// The decode step's position is the runtime symbol past.
		name, opt.Past = base, -1
	}
	g, err := corpus.Build(name, opt)
	require.NoError(t, err)
	prog, err := rules.NaiveProgram(context.Background(), g, rules.SaturateOptions{})
	require.NoError(t, err)
	lp, err := lower.FromExtraction(prog.EGraph, g, prog.Classes, prog.Problem, prog.Solution)
	require.NoError(t, err)
	ks, err := PrintProgram(lp)
	require.NoError(t, err)
	return lp, ks
}

// hostModule compiles the kernels with NVRTC for sm_90 when libnvrtc
// loads; without it, it returns a stand-in PTX declaring each entry and
// its parameters, which the fake driver reads as it reads NVRTC's.
func hostModule(t *testing.T, ks []*Kernel) (ptx string, cubin []byte) {
	t.Helper()
	lib, err := nvrtc.Load()
	if err != nil {
		if os.Getenv("LUMSEARCH_REQUIRE_NVRTC") == "1" {
			t.Fatal(err)
		}
		var b strings.Builder
		b.WriteString("// stand-in PTX: NVRTC is not installed\n.version 7.8\n.target sm_90\n.address_size 64\n")
		seen := map[string]bool{}
		for _, k := range ks {
			if seen[k.Name] {
				continue
			}
			seen[k.Name] = true
			params := make([]string, len(k.Params))
			for i := range k.Params {
				params[i] = fmt.Sprintf("\t.param .u64 %s_param_%d", k.Name, i)
			}
			fmt.Fprintf(&b, "\n.visible .entry %s(\n%s\n)\n{\n\tret;\n}\n", k.Name, strings.Join(params, ",\n"))
		}
		return b.String(), nil
	}
	res, err := compileProgram(lib, ks)
	require.NoError(t, err)
	require.NotEmpty(t, res.PTX)
	return res.PTX, slices.Clone(res.CUBIN)
}

// compileProgram compiles a program's kernels with NVRTC for sm_90, once
// per test binary for each source: the host library's tests and
// TestPrintNaivePrograms compile the same naive programs. The result is
// shared: callers must not modify it.
func compileProgram(lib *nvrtc.Library, ks []*Kernel) (*nvrtc.Result, error) {
	src := NVRTCPrelude + Source(ks)
	return programModules.get(src, func() (*nvrtc.Result, error) {
		return lib.Compile(context.Background(), src, "model.cu", nvrtc.Options{Arch: "sm_90"})
	})
}

var programModules onceCache[string, *nvrtc.Result]

// hostDriverProgram is the C program the tests link with the library: it
// lists the tensors, creates the model and, when that succeeds, exercises
// every call (with zeroed weights and inputs, valid on a real device too)
// and the errors of calling out of order or with a wrong name or size.
const hostDriverProgram = `#include "model.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char err[512];

static void report(const char* what, int rc) {
    printf("%s: %d: %s\n", what, rc, rc == LUM_OK ? "ok" : err);
}

int main(void) {
    size_t n = lum_tensor_count(), i;
    for (i = 0; i < n; i++) {
        const lum_tensor_info* t = lum_tensor(i);
        long long elems = 1;
        int d;
        for (d = 0; d < t->rank; d++) elems *= t->shape[d];
        printf("tensor %d %s %s rank %d elements %lld bytes %zu\n", (int)t->kind, t->name, t->dtype, t->rank, elems, t->bytes);
    }
    printf("past the end: %s\n", lum_tensor(n) == NULL ? "NULL" : "not NULL");
    lum_model* m = (lum_model*)&n;
    int rc = lum_create(&m, err, sizeof err);
    if (rc != LUM_OK) {
        report("lum_create", rc);
        printf("model %s\n", m == NULL ? "NULL" : "set");
        lum_destroy(NULL);
        printf("done\n");
        return 0;
    }
    printf("created from %s\n", lum_module_image(m));
    report("run before prepare", lum_run(m, err, sizeof err));
    report("prepare before weights", lum_prepare(m, err, sizeof err));
    report("unknown weight", lum_load_weights(m, "no such weight", "", 0, err, sizeof err));
    int wrong = 0;
    for (i = 0; i < n; i++) {
        const lum_tensor_info* t = lum_tensor(i);
        if (t->kind != LUM_WEIGHT) continue;
        unsigned char* data = calloc(1, t->bytes + 1);
        if (!wrong) {
            report("wrong size", lum_load_weights(m, t->name, data, t->bytes + 1, err, sizeof err));
            wrong = 1;
        }
        rc = lum_load_weights(m, t->name, data, t->bytes, err, sizeof err);
        if (rc != LUM_OK) report(t->name, rc);
        free(data);
    }
    printf("prepare\n");
    report("lum_prepare", lum_prepare(m, err, sizeof err));
    int inputs = 0;
    for (i = 0; i < n; i++) inputs += lum_tensor(i)->kind == LUM_INPUT;
    if (inputs > 0) report("run before inputs", lum_run(m, err, sizeof err));
    for (i = 0; i < n; i++) {
        const lum_tensor_info* t = lum_tensor(i);
        if (t->kind != LUM_INPUT) continue;
        unsigned char* data = calloc(1, t->bytes);
        if (t->rank == 0 && t->bytes == 4) {
            /* A runtime extent is refused outside its range. */
            int far = 1000000;
            printf("far %s: ", t->name);
            report("set", lum_set_input(m, t->name, &far, 4, err, sizeof err));
        }
        report(t->name, lum_set_input(m, t->name, data, t->bytes, err, sizeof err));
        free(data);
    }
    printf("run\n");
    report("lum_run", lum_run(m, err, sizeof err));
    for (i = 0; i < n; i++) {
        const lum_tensor_info* t = lum_tensor(i);
        if (t->kind == LUM_OUTPUT) {
            unsigned char* data = malloc(t->bytes);
            report(t->name, lum_get_output(m, t->name, data, t->bytes, err, sizeof err));
            free(data);
        }
        if (t->kind == LUM_STATE) {
            unsigned char* in = malloc(t->bytes);
            unsigned char* out = calloc(1, t->bytes);
            size_t k;
            for (k = 0; k < t->bytes; k++) in[k] = (unsigned char)(k * 7 + 3);
            report("set state", lum_set_state(m, t->name, in, t->bytes, err, sizeof err));
            report("get state", lum_get_state(m, t->name, out, t->bytes, err, sizeof err));
            printf("state %s round trip: %s\n", t->name, memcmp(in, out, t->bytes) == 0 ? "same" : "different");
            free(in);
            free(out);
        }
    }
    report("unknown output", lum_get_output(m, "no such output", err, 0, err, sizeof err));
    lum_destroy(m);
    printf("done\n");
    return 0;
}
`

// fakeDriver is a libcuda.so.1 that runs nothing: device memory is host
// memory, a module is its PTX text (it refuses cubins, as a driver does
// for another architecture), a function counts its parameters in the PTX,
// and each launch prints its kernel, shape and parameters as allocation
// plus offset. Its environment makes cuInit find no device
// (FAKE_CUDA_NO_DEVICE) or the Nth allocation fail (FAKE_CUDA_FAIL_ALLOC),
// or each copy to the device print its destination, size and the FNV-1a
// hash of its bytes (FAKE_CUDA_LOG_COPIES).
// At unload it reports what was left allocated.
const fakeDriver = `#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef unsigned long long CUdeviceptr;
typedef struct { char name[128]; int params; } fn_t;
typedef struct { const char* text; } mod_t;
static struct { unsigned char* p; size_t n; int live; } allocs[4096];
static fn_t fns[4096];
static int nallocs, nfns, live_allocs, live_mods, retained, inited, depth, fail_alloc = -1;
static int ctx_token;

static int current(void) { return depth > 0 ? 0 : 201; }

int cuInit(unsigned flags) {
    (void)flags;
    if (getenv("FAKE_CUDA_NO_DEVICE")) return 100;
    if (getenv("FAKE_CUDA_FAIL_ALLOC")) fail_alloc = atoi(getenv("FAKE_CUDA_FAIL_ALLOC"));
    inited = 1;
    return 0;
}
int cuDeviceGet(int* d, int ordinal) { if (!inited) return 3; if (ordinal != 0) return 101; *d = 0; return 0; }
int cuDevicePrimaryCtxRetain(void** ctx, int d) { (void)d; *ctx = &ctx_token; retained++; return 0; }
int cuDevicePrimaryCtxRelease_v2(int d) { (void)d; retained--; return 0; }
int cuCtxPushCurrent_v2(void* c) { if (c != &ctx_token) return 201; depth++; return 0; }
int cuCtxPopCurrent_v2(void** c) { if (depth == 0) return 201; depth--; if (c) *c = &ctx_token; return 0; }
int cuCtxSynchronize(void) { return current(); }
int cuModuleLoadData(void** mod, const void* image) {
    const char* s = (const char*)image;
    if (current()) return 201;
    if (memcmp(s, "\177ELF", 4) == 0) { printf("fake: refused a cubin\n"); return 209; }
    if (!strstr(s, ".version")) return 218;
    mod_t* m = malloc(sizeof *m);
    m->text = s;
    *mod = m;
    live_mods++;
    return 0;
}
int cuModuleUnload(void* mod) { if (current()) return 201; free(mod); live_mods--; return 0; }
int cuModuleGetFunction(void** fn, void* mod, const char* name) {
    char pattern[160];
    snprintf(pattern, sizeof pattern, ".entry %s(", name);
    const char* p = strstr(((mod_t*)mod)->text, pattern);
    if (p == NULL || nfns == 4096) return 500;
    const char* end = strchr(p, ')');
    fn_t* f = &fns[nfns++];
    snprintf(f->name, sizeof f->name, "%s", name);
    for (p = strstr(p, ".param"); p != NULL && p < end; p = strstr(p + 1, ".param")) f->params++;
    *fn = f;
    return 0;
}
static int find(CUdeviceptr p, size_t n, size_t* off) {
    int i;
    for (i = 0; i < nallocs; i++) {
        uintptr_t base = (uintptr_t)allocs[i].p;
        if (allocs[i].live && p >= base && p + n <= base + allocs[i].n) { *off = p - base; return i; }
    }
    return -1;
}
int cuMemAlloc_v2(CUdeviceptr* p, size_t n) {
    if (current()) return 201;
    if (nallocs + 1 == fail_alloc || nallocs == 4096) return 2;
    allocs[nallocs].p = calloc(1, n);
    allocs[nallocs].n = n;
    allocs[nallocs].live = 1;
    *p = (uintptr_t)allocs[nallocs++].p;
    live_allocs++;
    return 0;
}
int cuMemFree_v2(CUdeviceptr p) {
    size_t off;
    int i = find(p, 0, &off);
    if (current()) return 201;
    if (i < 0 || off != 0) return 1;
    free(allocs[i].p);
    allocs[i].live = 0;
    live_allocs--;
    return 0;
}
static void* at(CUdeviceptr p, size_t n) {
    size_t off;
    if (find(p, n, &off) < 0) { printf("fake: %zu bytes at %llx lie outside every allocation\n", n, p); return NULL; }
    return (void*)(uintptr_t)p;
}
int cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
    void* d = at(dst, n);
    if (current()) return 201;
    if (!d) return 1;
    memcpy(d, src, n);
    if (getenv("FAKE_CUDA_LOG_COPIES")) {
        size_t off, i;
        unsigned long long h = 14695981039346656037ULL;
        int a = find(dst, n, &off);
        for (i = 0; i < n; i++) h = (h ^ ((const unsigned char*)src)[i]) * 1099511628211ULL;
        printf("copy a%d+%zu %zu bytes fnv %016llx\n", a, off, n, h);
    }
    return 0;
}
int cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) { void* s = at(src, n); if (current()) return 201; if (!s) return 1; memcpy(dst, s, n); return 0; }
int cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n) { void* d = at(dst, n); if (current()) return 201; if (!d) return 1; memset(d, v, n); return 0; }
int cuLaunchKernel(void* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, void* stream, void** params, void** extra) {
    fn_t* f = (fn_t*)fn;
    int i;
    if (current()) return 201;
    if (shared != 0 || stream != NULL || extra != NULL) return 1;
    printf("launch %s grid %u %u %u block %u %u %u:", f->name, gx, gy, gz, bx, by, bz);
    for (i = 0; i < f->params; i++) {
        size_t off;
        CUdeviceptr p = *(CUdeviceptr*)params[i];
        int a = find(p, 0, &off);
        if (a < 0) printf(" ?"); else printf(" a%d+%zu", a, off);
    }
    printf("\n");
    return 0;
}
int cuGetErrorString(int r, const char** s) {
    switch (r) {
    case 0: *s = "no error"; return 0;
    case 1: *s = "invalid argument"; return 0;
    case 2: *s = "out of memory"; return 0;
    case 3: *s = "initialization error"; return 0;
    case 100: *s = "no CUDA-capable device is detected"; return 0;
    case 101: *s = "invalid device ordinal"; return 0;
    case 201: *s = "invalid device context"; return 0;
    case 209: *s = "no kernel image is available for execution on the device"; return 0;
    case 218: *s = "a PTX JIT compilation failed"; return 0;
    case 500: *s = "named symbol not found"; return 0;
    }
    return 1;
}
__attribute__((destructor)) static void report(void) {
    printf("fake: %d allocations outstanding, %d modules loaded, %d contexts retained, context depth %d\n",
           live_allocs, live_mods, retained, depth);
    fflush(stdout);
}
`

// buildHost writes the library and the driver program into a new
// directory, builds them as CI does (g++ with every warning an error, the
// header as C) and returns the executable.
func buildHost(t *testing.T, header, source string) string {
	t.Helper()
	return buildHostWith(t, header, source, hostDriverProgram)
}

// buildHostWith is buildHost with another driver program and more
// compiler flags.
func buildHostWith(t *testing.T, header, source, program string, flags ...string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range map[string]string{"model.h": header, "model.cpp": source, "main.c": program} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644))
	}
	run := func(name string, args ...string) {
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s %s:\n%s", name, strings.Join(args, " "), out)
	}
	run("g++", slices.Concat([]string{"-std=c++17", "-Wall", "-Wextra", "-Werror", "-O1"}, flags, []string{"-c", "model.cpp", "-o", "model.o"})...)
	run("gcc", slices.Concat([]string{"-x", "c", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"}, flags, []string{"-c", "main.c", "-o", "main.o"})...)
	run("g++", slices.Concat([]string{"main.o", "model.o", "-o", "main"}, flags, []string{"-ldl"})...)
	return filepath.Join(dir, "main")
}

// fakeDriverDir builds the fake libcuda.so.1 into a directory of its own.
func fakeDriverDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "fake.c"), []byte(fakeDriver), 0o644))
	cmd := exec.Command("gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-O1", "fake.c", "-o", "libcuda.so.1")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return dir
}

// runHost runs the driver program with env added and returns its output.
func runHost(t *testing.T, exe string, env ...string) string {
	t.Helper()
	return runHostArgs(t, exe, nil, env...)
}

// runHostArgs is runHost with command-line arguments.
func runHostArgs(t *testing.T, exe string, args []string, env ...string) string {
	t.Helper()
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Run(), "the program must exit normally:\n%s", out.String())
	return out.String()
}

func needCompilers(t *testing.T) {
	t.Helper()
	for _, c := range []string{"g++", "gcc"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("the host library test needs %s: %v", c, err)
		}
	}
}

// expectedLaunches are the lines the fake driver prints for launches
// [from, to): allocation 0 is the arena, then each other buffer in order.
func expectedLaunches(lp *lower.Program, ks []*Kernel, from, to int) []string {
	return expectedLaunchesAt(lp, ks, from, to, -1, -1)
}

// expectedLaunchesAt is expectedLaunches for a serving step of T tokens of
// S sequences present (T < 0: not a step): the grids of its row-wise
// launches follow them.
func expectedLaunchesAt(lp *lower.Program, ks []*Kernel, from, to int, T, S int64) []string {
	alloc := map[int]int{}
	for _, b := range lp.Buffers {
		if b.Kind != lower.Temp {
			alloc[b.ID] = len(alloc) + 1
		}
	}
	launches := slices.Concat(lp.Prep, lp.Run)
	var lines []string
	for i := from; i < to; i++ {
		k := ks[i]
		grid := k.Grid
		if r := launches[i].Rows; T >= 0 && r != nil {
			n := T
			if r.Seqs {
				n = S
			}
			grid = k.Rows.Of(grid, n)
		}
		line := fmt.Sprintf("launch %s grid %d %d %d block %d %d %d:", k.Name, grid[0], grid[1], grid[2], k.Block[0], k.Block[1], k.Block[2])
		for _, id := range launches[i].Params() {
			if b := lp.Buffers[id]; b.Kind == lower.Temp {
				line += fmt.Sprintf(" a0+%d", b.Offset)
			} else {
				line += fmt.Sprintf(" a%d+0", alloc[id])
			}
		}
		lines = append(lines, line)
	}
	return lines
}

var launchLine = regexp.MustCompile(`(?m)^launch .*$`)

// section returns the launch lines printed between the lines start and
// end.
func section(out, start, end string) []string {
	i := strings.Index(out, "\n"+start+"\n")
	j := strings.Index(out, "\n"+end)
	if i < 0 || j < i {
		return nil
	}
	return launchLine.FindAllString(out[i:j], -1)
}

// TestHostLibrary builds the host library of tiny programs with g++ and
// runs it against the driver this machine has (none, on CI: lum_create
// must fail naming libcuda.so.1) and against a fake libcuda.so.1 that
// records every launch: the preparation and the run launch each kernel
// with its grid, block and buffers (arena temps at their offsets), in
// order; errors name the call; nothing is left allocated.
func TestHostLibrary(t *testing.T) {
	// Parallel: independent of the other tests, it shares the machine's
	// cores with them once the sequential tests are done.
	t.Parallel()
	needCompilers(t)
	fake := fakeDriverDir(t)
	for _, name := range []string{"tiny-llama:layer", "tiny-gpt2:decode", "tiny-llama:decode@runtime"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			lp, ks := hostProgram(t, name)
			ptx, cubin := hostModule(t, ks)
			header, source, err := HostLibrary(lp, ks, ptx, cubin, "sm_90")
			require.NoError(t, err)
			exe := buildHost(t, header, source)

			out := runHost(t, exe)
			for _, b := range lp.Buffers {
				if b.Kind == lower.Weight || b.Kind == lower.Input || b.Kind == lower.State || b.Kind == lower.Output {
					assert.Contains(t, out, fmt.Sprintf(" %s %s rank %d elements %d bytes %d\n", b.Name, b.DType, len(b.Shape), b.Shape.NumElements(), b.Bytes))
				}
			}
			assert.Contains(t, out, "past the end: NULL\n")
			t.Run("this machine's driver", func(t *testing.T) { checkMachineDriver(t, out) })

			out = runHost(t, exe, "LD_LIBRARY_PATH="+fake)
			assert.Contains(t, out, "created from ptx\n")
			if len(cubin) > 0 {
				assert.Contains(t, out, "fake: refused a cubin\n")
			}
			assert.Contains(t, out, "run before prepare: 5: lum_run: the model is not prepared")
			assert.Regexp(t, `prepare before weights: 5: lum_prepare: weight \S+ was not loaded`, out)
			assert.Contains(t, out, `unknown weight: 4: lum_load_weights: the model has no weight named "no such weight"`)
			assert.Regexp(t, `wrong size: 4: lum_load_weights: weight \S+ \w+\[[\d ]*\] is (\d+) bytes, not \d+`, out)
			assert.Contains(t, out, "lum_prepare: 0: ok\n")
			assert.Regexp(t, `run before inputs: 5: lum_run: input \S+ was not set`, out)
			assert.Contains(t, out, "lum_run: 0: ok\n")
			for _, s := range lp.Symbols {
				// The harness sets each 4-byte scalar input to 1000000 first.
				assert.Contains(t, out, fmt.Sprintf("far %s: set: 4: lum_set_input: %s=1000000 is outside the range the model was compiled for, %d..%d", s.Name, s.Name, s.Lo, s.Hi))
			}
			if strings.HasSuffix(name, "@runtime") {
				assert.NotEmpty(t, lp.Symbols, "a runtime decode step has its position as a symbol")
			}
			for oname := range lp.Outputs {
				assert.Contains(t, out, oname+": 0: ok\n")
			}
			for sname := range lp.Updates {
				assert.Contains(t, out, "state "+sname+" round trip: same\n")
			}
			assert.Contains(t, out, `unknown output: 4: lum_get_output: the model has no output named "no such output"`)
			assert.Equal(t, expectedLaunches(lp, ks, 0, len(lp.Prep)), section(out, "prepare", "lum_prepare"), "the preparation's launches")
			assert.Equal(t, expectedLaunches(lp, ks, len(lp.Prep), len(ks)), section(out, "run", "lum_run"), "the run's launches")
			assert.NotContains(t, out, "outside every allocation")
			// lum_destroy's dlclose unloads the fake, which reports.
			assert.Contains(t, out, "fake: 0 allocations outstanding, 0 modules loaded, 0 contexts retained, context depth 0\ndone\n")

			out = runHost(t, exe, "LD_LIBRARY_PATH="+fake, "FAKE_CUDA_NO_DEVICE=1")
			assert.Contains(t, out, "lum_create: 2: cuInit: no CUDA-capable device is detected (CUresult 100)\nmodel NULL\n")
			assert.Equal(t, driverNoDevice, classifyMachineDriver(out), "a driver without a device is told apart:\n%s", out)

			out = runHost(t, exe, "LD_LIBRARY_PATH="+fake, "FAKE_CUDA_FAIL_ALLOC=3")
			assert.Regexp(t, `(?m)^lum_create: 2: cuMemAlloc \w+ \S+ \w+\[[\d ]*\] \(\d+ bytes\): out of memory \(CUresult 2\)$`, out)
			assert.Contains(t, out, "fake: 0 allocations outstanding, 0 modules loaded, 0 contexts retained, context depth 0\n")
		})
	}
}

// machineDriver is what the host program met on the machine the tests
// run on, read from its output.
type machineDriver int

const (
	// driverRuns: lum_create succeeded and the model ran.
	driverRuns machineDriver = iota
	// driverMissing: no libcuda.so.1 (LUM_ERR_DRIVER).
	driverMissing
	// driverNoDevice: the driver is installed but cuInit finds no GPU
	// (CUDA_ERROR_NO_DEVICE, 100), as in a CI container that has the
	// driver package and no device.
	driverNoDevice
	// driverBroken: anything else, a failure.
	driverBroken
)

var (
	noDriverLine = regexp.MustCompile(`(?m)^lum_create: 1: libcuda\.so\.1 not found: .+$`)
	noDeviceLine = regexp.MustCompile(`(?m)^lum_create: 2: cuInit: .*\(CUresult 100\)$`)
)

// classifyMachineDriver reads the host program's output against this
// machine's own driver.
func classifyMachineDriver(out string) machineDriver {
	created := strings.Contains(out, "created from")
	switch {
	case created && strings.Contains(out, "lum_run: 0: ok\n"):
		return driverRuns
	case created:
		return driverBroken
	case noDriverLine.MatchString(out) && strings.Contains(out, "model NULL\ndone\n"):
		return driverMissing
	case noDeviceLine.MatchString(out) && strings.Contains(out, "model NULL\ndone\n"):
		return driverNoDevice
	}
	return driverBroken
}

// checkMachineDriver judges the host program's run against this
// machine's driver: with a GPU every call succeeds, without the driver
// lum_create says libcuda.so.1 is missing, and with a driver but no
// device the check skips, saying so, as there is nothing to run on.
func checkMachineDriver(t *testing.T, out string) {
	switch classifyMachineDriver(out) {
	case driverRuns:
		t.Logf("this machine has a CUDA driver and a device:\n%s", out)
	case driverMissing:
	case driverNoDevice:
		t.Skipf("this machine has a CUDA driver but no device (%s): nothing runs on it", noDeviceLine.FindString(out))
	default:
		t.Errorf("lum_create neither ran the model nor reported a missing driver or device:\n%s", out)
	}
}

// TestClassifyMachineDriver: the host program's reports of a device, of
// no driver and of a driver without a device are told apart, and any
// other failure is one.
func TestClassifyMachineDriver(t *testing.T) {
	tests := []struct {
		name, out string
		want      machineDriver
	}{
		{"device", "lum_create: 0: ok\ncreated from cubin\nlum_run: 0: ok\ndone\n", driverRuns},
		{"no driver", "lum_create: 1: libcuda.so.1 not found: libcuda.so.1: cannot open shared object file (the NVIDIA driver is not installed)\nmodel NULL\ndone\n", driverMissing},
		{"driver without device", "lum_create: 2: cuInit: no CUDA-capable device is detected (CUresult 100)\nmodel NULL\ndone\n", driverNoDevice},
		{"another cuInit failure", "lum_create: 2: cuInit: unknown error (CUresult 999)\nmodel NULL\ndone\n", driverBroken},
		{"no device, then a crash", "lum_create: 2: cuInit: no CUDA-capable device is detected (CUresult 100)\nmodel NULL\n", driverBroken},
		{"a device that fails to run", "lum_create: 0: ok\ncreated from cubin\nlum_run: 2: cuLaunchKernel: out of memory (CUresult 2)\ndone\n", driverBroken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, classifyMachineDriver(tt.out))
		})
	}
}

// TestHostLibraryWithoutNVRTC builds a library that embeds no kernels:
// lum_create says so, and the tensor table still works.
func TestHostLibraryWithoutNVRTC(t *testing.T) {
	needCompilers(t)
	lp, ks := hostProgram(t, "tiny-gpt2:decode")
	header, source, err := HostLibrary(lp, ks, "", nil, "sm_90")
	require.NoError(t, err)
	assert.Contains(t, header, "#define LUM_HAS_KERNELS 0\n")
	out := runHost(t, buildHost(t, header, source))
	assert.Contains(t, out, "lum_create: 3: the model was compiled without NVRTC: no kernels embedded")
	assert.Contains(t, out, "tensor 2 past_key_values.0.key f32 rank 4")
	assert.Contains(t, out, "model NULL\ndone\n")
}

// TestHostLibraryText checks the generated text without compiling it: it
// is deterministic, includes no CUDA header, declares the driver calls
// itself, embeds the PTX and CUBIN, and documents the tensors; bad input
// is refused.
func TestHostLibraryText(t *testing.T) {
	lp, ks := hostProgram(t, "tiny-gpt2:decode")
	ptx := ".version 7.8\n// a stand-in\n"
	cubin := []byte("\x7fELF stand-in")
	h1, s1, err := HostLibrary(lp, ks, ptx, cubin, "sm_90")
	require.NoError(t, err)
	h2, s2, err := HostLibrary(lp, ks, ptx, cubin, "sm_90")
	require.NoError(t, err)
	assert.Equal(t, h1, h2)
	assert.Equal(t, s1, s2)

	assert.NotContains(t, s1, "#include <cuda")
	assert.NotContains(t, s1, "#include \"cuda")
	assert.NotContains(t, h1, "cuda.h")
	assert.Contains(t, s1, "CUresult (*cuLaunchKernel)(CUfunction fn,")
	assert.Contains(t, s1, `dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)`)
	for _, f := range []string{"cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuModuleLoadData", "cuModuleGetFunction", "cuMemAlloc_v2",
		"cuMemFree_v2", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuLaunchKernel", "cuCtxSynchronize", "cuGetErrorString", "cuModuleUnload"} {
		assert.Contains(t, s1, `"`+f+`"`, f)
	}
	assert.Contains(t, s1, fmt.Sprintf("constexpr size_t kPTXBytes = %d;\n", len(ptx)))
	assert.Contains(t, s1, fmt.Sprintf("constexpr size_t kCUBINBytes = %d;\n", len(cubin)))
	assert.Contains(t, s1, "const unsigned char kCUBIN[13] = {\n    127, 69, 76, 70, 32,")
	assert.Contains(t, h1, "int lum_create(lum_model** out, char* err, size_t errlen);")
	assert.Contains(t, h1, "int lum_load_prepared(lum_model* m, const char* path, char* err, size_t errlen);")
	assert.Contains(t, h1, "LUM_ERR_FILE = 7")
	digest, err := lower.WeightsDigest(lp)
	require.NoError(t, err)
	assert.Contains(t, h1, "#define LUM_PROGRAM_DIGEST \""+digest+"\"\n")
	stored, err := lower.StoredBuffers(lp)
	require.NoError(t, err)
	assert.Contains(t, s1, fmt.Sprintf("constexpr int kNumStored = %d;\n", len(stored)))
	assert.Contains(t, s1, "const char kDigestKey[] = \"lumsearch.program\";\n")
	assert.Contains(t, h1, "#define LUM_ARCH \"sm_90\"\n")
	assert.Regexp(t, `(?m)^ \*   state   past_key_values\.0\.key +f32\[1 4 4 16\], 1024 bytes$`, h1)
	assert.Regexp(t, `(?m)^ \*   input   input_ids +i64\[1 1\], 8 bytes$`, h1)

	_, _, err = HostLibrary(lp, ks[1:], ptx, cubin, "sm_90")
	assert.ErrorContains(t, err, "kernels for")
	_, _, err = HostLibrary(lp, ks, "", cubin, "sm_90")
	assert.ErrorContains(t, err, "a CUBIN without its PTX")

	assert.Equal(t, `"a\"b\\c\012\303\251\077"`, cString("a\"b\\c\né?"))
	assert.Equal(t, "a* /b/ *c?", commentText("a*/b/*c\n"))
}
