// Package fakecuda builds, for tests, a fake CUDA driver (libcuda.so.1)
// that runs nothing: device memory is host memory (zeroed when
// allocated), launches, graph launches, memsets and event records are
// written to a log the test reads, and switches turn failures on. A
// captured graph keeps the lines of the launches captured into it, which
// its replays can log, so a test sees what each replay would run. Its L2
// cache is 1 MiB; every event record advances its clock by 1.5 ms.
// Packages that load the driver (gpu, measure) test their calls to it
// without a GPU.
package fakecuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/require"
)

// source is a libcuda.so.1 that runs nothing: device memory is host
// memory, launches are written to a log that the test reads through
// fake_log, and fake_set turns failures on and off.
const source = `#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
static int no_device, fail_alloc, nparams, names, graph_log, fail_capture;
static char logbuf[1 << 16];
static size_t loglen;
static double clock_ms;
static __thread int depth;
static int capturing;
static uintptr_t capture_stream;
static int captured, allocs, graphs;
/* The lines of the launches captured so far, which EndCapture hands to
   its graph. */
static char capbuf[1 << 16];
static size_t caplen;

static void logf_(const char *line) {
    size_t n = strlen(line);
    if (loglen + n < sizeof logbuf) { memcpy(logbuf + loglen, line, n); loglen += n; logbuf[loglen] = 0; }
}

void fake_set(const char *key, int v) {
    if (!strcmp(key, "no_device")) no_device = v;
    if (!strcmp(key, "fail_alloc")) fail_alloc = v;
    if (!strcmp(key, "nparams")) nparams = v;
    if (!strcmp(key, "names")) names = v;
    if (!strcmp(key, "graph_log")) graph_log = v;
    if (!strcmp(key, "fail_capture")) fail_capture = v;
    if (!strcmp(key, "reset")) { loglen = 0; logbuf[0] = 0; }
}
const char *fake_log(void) { return logbuf; }
int fake_allocs(void) { return __atomic_load_n(&allocs, __ATOMIC_SEQ_CST); }
int fake_depth(void) { return depth; }
int fake_graphs(void) { return graphs; }

CUresult cuInit(unsigned f) { (void)f; return no_device ? 100 : 0; }
CUresult cuDriverGetVersion(int *v) { *v = 12040; return 0; }
CUresult cuGetErrorName(CUresult r, const char **s) {
    switch (r) {
    case 2: *s = "CUDA_ERROR_OUT_OF_MEMORY"; return 0;
    case 100: *s = "CUDA_ERROR_NO_DEVICE"; return 0;
    case 901: *s = "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"; return 0;
    }
    return 1;
}
CUresult cuGetErrorString(CUresult r, const char **s) {
    switch (r) {
    case 2: *s = "out of memory"; return 0;
    case 100: *s = "no CUDA-capable device is detected"; return 0;
    }
    return 1;
}
CUresult cuDeviceGetCount(int *n) { *n = 1; return 0; }
CUresult cuDeviceGet(int *d, int o) { if (o != 0) return 101; *d = 0; return 0; }
CUresult cuDeviceGetName(char *s, int n, int d) { (void)d; snprintf(s, n, "Fake GPU"); return 0; }
CUresult cuDeviceGetAttribute(int *v, int a, int d) {
    (void)d;
    switch (a) {
    case 1: *v = 1024; break;
    case 8: *v = 49152; break;
    case 10: *v = 32; break;
    case 13: *v = 1980000; break;
    case 16: *v = 132; break;
    case 75: *v = 9; break;
    case 76: *v = 0; break;
    case 97: *v = 232448; break;
    case 38: *v = 1 << 20; break;
    default: return 1;
    }
    return 0;
}
CUresult cuDeviceTotalMem_v2(size_t *b, int d) { (void)d; *b = (size_t)80 << 30; return 0; }
static int ctx_obj;
CUresult cuDevicePrimaryCtxRetain(void **c, int d) { (void)d; *c = &ctx_obj; return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(int d) { (void)d; return 0; }
CUresult cuCtxPushCurrent_v2(void *c) { if (c != &ctx_obj) return 201; depth++; return 0; }
CUresult cuCtxPopCurrent_v2(void **c) { if (depth == 0) return 201; depth--; if (c) *c = &ctx_obj; return 0; }
CUresult cuCtxSynchronize(void) { return depth ? 0 : 201; }
#define NEED_CTX if (depth == 0) return 201
CUresult cuMemAlloc_v2(uint64_t *p, size_t n) {
    NEED_CTX;
    if (fail_alloc) return 2;
    /* Zeroed, so that what a test reads back from memory no launch wrote
       is the same at every run. */
    *p = (uint64_t)(uintptr_t)calloc(1, n ? n : 1); __atomic_add_fetch(&allocs, 1, __ATOMIC_SEQ_CST); return 0;
}
CUresult cuMemFree_v2(uint64_t p) { NEED_CTX; free((void *)(uintptr_t)p); __atomic_sub_fetch(&allocs, 1, __ATOMIC_SEQ_CST); return 0; }
CUresult cuMemcpyHtoD_v2(uint64_t d, const void *s, size_t n) { NEED_CTX; memcpy((void *)(uintptr_t)d, s, n); return 0; }
CUresult cuMemcpyDtoH_v2(void *d, uint64_t s, size_t n) { NEED_CTX; memcpy(d, (void *)(uintptr_t)s, n); return 0; }
CUresult cuMemsetD8_v2(uint64_t d, unsigned char v, size_t n) {
    NEED_CTX; memset((void *)(uintptr_t)d, v, n);
    char line[64]; snprintf(line, sizeof line, "memset %zu\n", n); logf_(line);
    return 0;
}
static int mod_obj;
/* A function a name: launches can log the kernel they run. */
#define MAXFN 4096
static struct fn { char name[256]; } fns[MAXFN];
static int nfns;
CUresult cuModuleLoadData(void **m, const void *img) {
    NEED_CTX;
    char line[128];
    snprintf(line, sizeof line, "load %.8s\n", (const char *)img);
    logf_(line);
    *m = &mod_obj; return 0;
}
CUresult cuModuleGetFunction(void **f, void *m, const char *name) {
    NEED_CTX;
    if (m != &mod_obj) return 400;
    if (strcmp(name, "missing") == 0) return 500;
    for (int i = 0; i < nfns; i++)
        if (!strcmp(fns[i].name, name)) { *f = &fns[i]; return 0; }
    if (nfns == MAXFN || strlen(name) >= sizeof fns[0].name) return 2;
    strcpy(fns[nfns].name, name);
    *f = &fns[nfns++]; return 0;
}
CUresult cuModuleUnload(void *m) { NEED_CTX; return m == &mod_obj ? 0 : 400; }
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, uintptr_t stream, void **params, void **extra) {
    NEED_CTX;
    struct fn *fp = f;
    if (fp < fns || fp >= fns + nfns || extra) return 400;
    char line[1024];
    int n = snprintf(line, sizeof line, "launch grid=%u,%u,%u block=%u,%u,%u shared=%u stream=%s",
                     gx, gy, gz, bx, by, bz, shared, stream ? "s" : "0");
    for (int i = 0; i < nparams; i++) {
        uint64_t w; memcpy(&w, params[i], 8);
        n += snprintf(line + n, sizeof line - n, " %llx", (unsigned long long)w);
    }
    if (names) n += snprintf(line + n, sizeof line - n, " kernel=%s", fp->name);
    snprintf(line + n, sizeof line - n, "\n");
    if (capturing && stream == capture_stream) {
        captured++;
        size_t k = strlen(line);
        if (caplen + k < sizeof capbuf) { memcpy(capbuf + caplen, line, k); caplen += k; capbuf[caplen] = 0; }
        return 0;
    }
    logf_(line);
    return 0;
}
static int stream_obj;
CUresult cuStreamCreate(uintptr_t *s, unsigned f) { NEED_CTX; (void)f; *s = (uintptr_t)&stream_obj; return 0; }
CUresult cuStreamSynchronize(uintptr_t s) { NEED_CTX; (void)s; return 0; }
CUresult cuStreamDestroy_v2(uintptr_t s) { NEED_CTX; (void)s; return 0; }
CUresult cuEventCreate(double **e, unsigned f) { NEED_CTX; (void)f; *e = malloc(sizeof(double)); **e = -1; return 0; }
CUresult cuEventRecord(double *e, uintptr_t s) {
    NEED_CTX; clock_ms += 1.5; *e = clock_ms;
    logf_(s ? "record stream=s\n" : "record stream=0\n");
    return 0;
}
CUresult cuEventSynchronize(double *e) { NEED_CTX; return *e < 0 ? 600 : 0; }
CUresult cuEventElapsedTime(float *ms, double *a, double *b) { NEED_CTX; *ms = (float)(*b - *a); return 0; }
CUresult cuEventDestroy_v2(double *e) { NEED_CTX; free(e); return 0; }
CUresult cuStreamBeginCapture_v2(uintptr_t s, unsigned mode) {
    NEED_CTX; (void)mode;
    if (capturing || !s) return 900;
    capturing = 1; capture_stream = s; captured = 0; caplen = 0; capbuf[0] = 0; return 0;
}
/* A graph, captured or instantiated: its kernels and their launch lines. */
struct graph { int n; char *lines; };
static struct graph *new_graph(int n, const char *lines) {
    struct graph *g = malloc(sizeof *g);
    size_t k = strlen(lines) + 1;
    g->n = n; g->lines = malloc(k); memcpy(g->lines, lines, k);
    graphs++;
    return g;
}
static void free_graph(struct graph *g) { free(g->lines); free(g); graphs--; }
CUresult cuStreamEndCapture(uintptr_t s, struct graph **g) {
    NEED_CTX;
    if (!capturing || s != capture_stream) return 900;
    capturing = 0;
    if (fail_capture) { *g = NULL; return 901; }
    *g = new_graph(captured, capbuf);
    if (graph_log) {
        char line[64]; snprintf(line, sizeof line, "capture %d kernels\n", captured); logf_(line);
    }
    return 0;
}
CUresult cuGraphInstantiateWithFlags(struct graph **x, struct graph *g, unsigned long long flags) {
    NEED_CTX; (void)flags; *x = new_graph(g->n, g->lines); return 0;
}
CUresult cuGraphLaunch(struct graph *x, uintptr_t s) {
    NEED_CTX; char line[64];
    snprintf(line, sizeof line, "graph launch %d kernels stream=%s\n", x->n, s ? "s" : "0");
    logf_(line);
    if (graph_log) {
        /* The graph's launches, each indented under its replay. */
        for (const char *p = x->lines; *p; ) {
            const char *e = strchr(p, '\n');
            size_t k = e ? (size_t)(e - p + 1) : strlen(p);
            char node[1100];
            snprintf(node, sizeof node, "  %.*s", (int)k, p);
            logf_(node);
            p += k;
        }
    }
    return 0;
}
CUresult cuGraphExecDestroy(struct graph *x) { NEED_CTX; free_graph(x); return 0; }
CUresult cuGraphDestroy(struct graph *g) { NEED_CTX; free_graph(g); return 0; }
`

// Driver is the fake driver, built once per test binary, and its control
// functions.
type Driver struct {
	// Path is the library's file, which LUMSEARCH_LIBCUDA points at.
	Path string
	// Set turns a switch on or off: "no_device" (cuInit fails),
	// "fail_alloc" (cuMemAlloc fails), "nparams" (parameters each launch
	// logs), "names" (each launch line ends with " kernel=" and its
	// kernel's name), "graph_log" (each capture logs "capture N kernels",
	// and each graph launch is followed by its kernels' launch lines,
	// indented two spaces), "fail_capture" (cuStreamEndCapture fails with
	// CUDA_ERROR_STREAM_CAPTURE_INVALIDATED), "reset" (clears the log).
	Set func(key string, v int32)
	// Log is every launch, graph launch, memset and event record since
	// the last reset, a line each.
	Log func() string
	// Allocs is the device allocations outstanding.
	Allocs func() int32
	// Depth is the context stack's depth.
	Depth func() int32
	// Graphs is the graphs and executable graphs not yet destroyed.
	Graphs func() int32
}

var (
	once     sync.Once
	lib      *Driver
	buildErr error
	skip     string
	output   string
	dir      string
)

// Cleanup removes the fake driver's folder; call it from TestMain after the
// tests.
func Cleanup() {
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
}

// Build builds the fake driver (once per test binary), points
// LUMSEARCH_LIBCUDA at it for the test and resets its switches; it skips
// the test when there is no C compiler.
func Build(t testing.TB) *Driver {
	t.Helper()
	once.Do(func() {
		cc := ""
		for _, c := range []string{"gcc", "g++"} {
			if _, err := exec.LookPath(c); err == nil {
				cc = c
				break
			}
		}
		if cc == "" {
			skip = "no gcc or g++ to build a fake libcuda.so.1"
			return
		}
		d, err := os.MkdirTemp("", "fakecuda")
		if err != nil {
			buildErr = err
			return
		}
		dir = d
		src := filepath.Join(d, "fake.c")
		lang := []string{"-std=c99"}
		if cc == "g++" {
			lang = []string{"-x", "c"}
		}
		if buildErr = os.WriteFile(src, []byte(source), 0o644); buildErr != nil {
			return
		}
		f := &Driver{Path: filepath.Join(d, "libcuda.so.1")}
		args := append(lang, "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-O1", src, "-o", f.Path)
		if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
			buildErr = err
			output = string(out)
			return
		}
		h, err := purego.Dlopen(f.Path, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err != nil {
			buildErr = err
			return
		}
		purego.RegisterLibFunc(&f.Set, h, "fake_set")
		purego.RegisterLibFunc(&f.Log, h, "fake_log")
		purego.RegisterLibFunc(&f.Allocs, h, "fake_allocs")
		purego.RegisterLibFunc(&f.Depth, h, "fake_depth")
		purego.RegisterLibFunc(&f.Graphs, h, "fake_graphs")
		lib = f
	})
	if skip != "" {
		t.Skip(skip)
	}
	require.NoError(t, buildErr, output)
	t.Setenv("LUMSEARCH_LIBCUDA", lib.Path)
	lib.Set("reset", 0)
	lib.Set("no_device", 0)
	lib.Set("fail_alloc", 0)
	lib.Set("nparams", 0)
	lib.Set("names", 0)
	lib.Set("graph_log", 0)
	lib.Set("fail_capture", 0)
	return lib
}
