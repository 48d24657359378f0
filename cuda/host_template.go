package cuda

// The fixed parts of the host library that HostLibrary writes around a
// model's tables: model.h's documentation and API, and model.cpp's driver
// declarations and implementation. The generated tables between
// hostSourcePrefix and hostSourceSuffix define kModelName, kArch,
// kArenaBytes, kNumBuffers, kNumKernels, kNumPrep, kNumLaunches,
// kMaxParams, kBuffers, kNumTensors, kTensors, kNumStored, kStored,
// kDigestKey, kProgramDigest, kKernelNames, kLaunchArgs, kLaunches, kPTX,
// kPTXBytes, kCUBIN and kCUBINBytes.

const hostHeaderDoc = ` *
 * Build model.cpp with any C++17 compiler; no CUDA toolkit is needed:
 *     g++ -std=c++17 -O2 -fPIC -shared model.cpp -o libmodel.so -ldl
 * (or compile it into your program and link with -ldl). At run time the
 * library loads the NVIDIA driver, libcuda.so.1, with dlopen, and loads the
 * kernels it embeds: the CUBIN for LUM_ARCH when the device runs it, else
 * the PTX, which the driver compiles for the device it finds.
 *
 * Use:
 *     lum_create                  once: driver, device 0's primary context,
 *                                 the kernels, every buffer allocated
 *     lum_load_weights            once per weight, by name
 *     lum_prepare                 uploads the constants and computes the
 *                                 weights prepared at load time
 *   or, instead of those two:
 *     lum_load_prepared           once: reads the prepared weights file
 *                                 (weights.safetensors, which lumsearch
 *                                 compile writes when the model came with
 *                                 weights) and runs no preparation
 *     lum_set_input  ...          per run: every input
 *     lum_run                     the run's kernels, in order, then waits
 *     lum_get_output ...          the results
 *     lum_destroy
 * States (decode caches) start zeroed, persist across runs and are
 * rewritten in place by lum_run; lum_get_state and lum_set_state read and
 * replace them. Loading a weight again after lum_prepare or
 * lum_load_prepared requires lum_prepare (every weight loaded) or
 * lum_load_prepared before the next run.
 *
 * The prepared weights file is a safetensors file (the Hugging Face
 * format): an 8-byte little-endian header length N (at most 100,000,000),
 * N bytes of JSON mapping each tensor's name to {"dtype", "shape",
 * "data_offsets": [begin, end]} plus a "__metadata__" object of strings,
 * then the data, each tensor's bytes at [begin, end) after the header, one
 * after the other. It holds the weights the run reads, by their names, and
 * the weights prepared from them at load time, by the names of their
 * buffers (t<ID>, as plan.json lists them); weights only the preparation
 * reads are left out. Its metadata's "lumsearch.program" must be
 * LUM_PROGRAM_DIGEST: prepared weights are valid only for the program they
 * were computed for.
 *
 * Data are row-major and little-endian in the tensor's dtype: f32, f16 and
 * bf16 as their raw 2- or 4-byte patterns, i32, i64, bool as one byte; the
 * byte count must equal the tensor's.
 *
 * Every function that returns int returns LUM_OK (0) on success and a
 * LUM_ERR_ code otherwise, writing a NUL-terminated message that names the
 * failed call into err when err is not NULL and errlen is not 0 (truncated
 * to errlen bytes). One thread at a time may use a lum_model; each call
 * makes the model's context current for its duration and restores the
 * caller's.
 *
`

const hostHeaderAPI = `/* The error codes. */
enum {
    LUM_OK = 0,
    LUM_ERR_DRIVER = 1,     /* libcuda.so.1 is missing or lacks a function */
    LUM_ERR_CUDA = 2,       /* a driver call failed: no device, out of memory, a launch failed */
    LUM_ERR_NO_KERNELS = 3, /* the model was compiled without NVRTC */
    LUM_ERR_ARGUMENT = 4,   /* a NULL argument, an unknown name or a wrong byte count */
    LUM_ERR_ORDER = 5,      /* a weight not loaded, lum_prepare not called, an input not set */
    LUM_ERR_MEMORY = 6,     /* host memory */
    LUM_ERR_FILE = 7        /* the prepared weights file cannot be read or does not fit the model */
};

/* The kinds of the tensors a caller reads or writes. */
enum lum_kind { LUM_INPUT = 0, LUM_WEIGHT = 1, LUM_STATE = 2, LUM_OUTPUT = 3 };

/* One tensor of the model. Callable without a GPU. */
typedef struct lum_tensor_info {
    const char* name;
    enum lum_kind kind;
    const char* dtype;       /* "f32", "f16", "bf16", "i32", "i64" or "bool" */
    int rank;
    const long long* shape;  /* rank dimensions; NULL when rank is 0 */
    size_t bytes;
} lum_tensor_info;

/* The number of tensors, and tensor i (NULL when i is out of range): inputs,
 * weights, states, then outputs. */
size_t lum_tensor_count(void);
const lum_tensor_info* lum_tensor(size_t i);

typedef struct lum_model lum_model;

/* Loads the driver, initializes it, retains device 0's primary context,
 * loads the kernels and allocates every buffer: the arena of intermediates
 * (one allocation), the weights, prepared weights, constants, states
 * (zeroed), inputs and outputs. On success *out is the model; on failure
 * *out is NULL and nothing is left allocated. */
int lum_create(lum_model** out, char* err, size_t errlen);
/* lum_create on another device. */
int lum_create_on(lum_model** out, int device, char* err, size_t errlen);

/* Copies the weight named name to the device. */
int lum_load_weights(lum_model* m, const char* name, const void* data, size_t bytes, char* err, size_t errlen);

/* Uploads the constants computed at compile time and runs the load-time
 * preparation; every weight must be loaded. */
int lum_prepare(lum_model* m, char* err, size_t errlen);

/* Loads the prepared weights file at path (see above) in place of
 * lum_load_weights and lum_prepare: checks the whole header first (its
 * size, its JSON, every tensor's name, dtype, shape and data_offsets
 * against the model, the tensors laid one after another to the end of the
 * file, none missing, and the program digest), then uploads the constants
 * and each tensor, and marks the model prepared; no preparation launch
 * runs. A file that does not fit fails with LUM_ERR_FILE, naming the file
 * and the tensor, and leaves the model as it was; a failure while
 * uploading leaves it unprepared. */
int lum_load_prepared(lum_model* m, const char* path, char* err, size_t errlen);

/* Copies the input named name to the device; it stays set for later runs. */
int lum_set_input(lum_model* m, const char* name, const void* data, size_t bytes, char* err, size_t errlen);

/* Launches the run's kernels in order and waits for them. */
int lum_run(lum_model* m, char* err, size_t errlen);

/* Copies the output named name from the device. */
int lum_get_output(lum_model* m, const char* name, void* data, size_t bytes, char* err, size_t errlen);

/* Reads and replaces the state named name (a decode cache). */
int lum_get_state(lum_model* m, const char* name, void* data, size_t bytes, char* err, size_t errlen);
int lum_set_state(lum_model* m, const char* name, const void* data, size_t bytes, char* err, size_t errlen);

/* Which embedded image the driver loaded: "cubin" or "ptx". */
const char* lum_module_image(const lum_model* m);

/* Frees the device memory, unloads the kernels, releases the context.
 * NULL is allowed. */
void lum_destroy(lum_model* m);
`

const hostSourcePrefix = `//
// It declares the CUDA driver-API functions it uses (no CUDA header) and
// loads libcuda.so.1 at run time; build it with any C++17 compiler and link
// with -ldl. model.h documents the API.

#include "model.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

static_assert(sizeof(void*) == 8, "the host library needs a 64-bit target");

// The driver API's types, as its ABI defines them.
typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUstream_st* CUstream;
typedef unsigned long long CUdeviceptr;

namespace {

// The driver functions, by the symbols libcuda.so.1 exports.
struct Driver {
    void* lib;
    CUresult (*cuInit)(unsigned int flags);
    CUresult (*cuDeviceGet)(CUdevice* device, int ordinal);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext* ctx, CUdevice device);
    CUresult (*cuDevicePrimaryCtxRelease)(CUdevice device);
    CUresult (*cuCtxPushCurrent)(CUcontext ctx);
    CUresult (*cuCtxPopCurrent)(CUcontext* ctx);
    CUresult (*cuCtxSynchronize)(void);
    CUresult (*cuModuleLoadData)(CUmodule* module, const void* image);
    CUresult (*cuModuleUnload)(CUmodule module);
    CUresult (*cuModuleGetFunction)(CUfunction* fn, CUmodule module, const char* name);
    CUresult (*cuMemAlloc)(CUdeviceptr* ptr, size_t bytes);
    CUresult (*cuMemFree)(CUdeviceptr ptr);
    CUresult (*cuMemcpyHtoD)(CUdeviceptr dst, const void* src, size_t bytes);
    CUresult (*cuMemcpyDtoH)(void* dst, CUdeviceptr src, size_t bytes);
    CUresult (*cuMemsetD8)(CUdeviceptr dst, unsigned char value, size_t bytes);
    CUresult (*cuLaunchKernel)(CUfunction fn, unsigned int gridX, unsigned int gridY, unsigned int gridZ,
                               unsigned int blockX, unsigned int blockY, unsigned int blockZ,
                               unsigned int sharedBytes, CUstream stream, void** params, void** extra);
    CUresult (*cuGetErrorString)(CUresult error, const char** text);
};

// The kinds of buffers (lower.BufferKind).
enum Kind { kInput, kWeight, kState, kConstant, kPrepared, kTemp, kOutput };

const char* const kKindNames[] = {"input", "weight", "state", "constant", "prepared", "temp", "output"};

struct BufferDesc {
    Kind kind;
    const char* name;
    const char* type;             // f32[4 64]
    unsigned long long bytes;
    long long offset;             // in the arena (temps); -1 for the others
    const unsigned char* data;    // a constant's bytes
};

struct LaunchDesc {
    int kernel;                   // in kKernelNames
    unsigned int grid[3], block[3];
    int first, count;             // its buffers in kLaunchArgs
};

struct StoredDesc {
    int buffer;                   // in kBuffers
    const char* dtype;            // its safetensors dtype: F32, F16, BF16, I32, I64 or BOOL
    int rank;
    const long long* shape;       // rank dimensions; nullptr when rank is 0
};
`

const hostSourceSuffix = `
}  // namespace

struct lum_model {
    Driver d;
    CUdevice device;
    CUcontext ctx;
    bool retained;
    CUmodule module;
    const char* image;
    CUfunction fn[kNumKernels + 1];
    CUdeviceptr arena;
    CUdeviceptr own[kNumBuffers + 1];    // each non-temp buffer's allocation
    CUdeviceptr ptr[kNumBuffers + 1];    // every buffer's address
    unsigned char ready[kNumBuffers + 1];  // weights loaded, inputs set
    bool prepared;
};

namespace {

__attribute__((format(printf, 4, 5)))
int fail(char* err, size_t errlen, int code, const char* format, ...) {
    if (err != nullptr && errlen > 0) {
        va_list args;
        va_start(args, format);
        vsnprintf(err, errlen, format, args);
        va_end(args);
    }
    return code;
}

const char* cudaText(const Driver& d, CUresult r) {
    const char* text = nullptr;
    if (d.cuGetErrorString == nullptr || d.cuGetErrorString(r, &text) != 0 || text == nullptr) {
        return "unknown CUDA error";
    }
    return text;
}

// cudaFail reports a failed driver call: "call: error string (CUresult N)".
__attribute__((format(printf, 5, 6)))
int cudaFail(const Driver& d, CUresult r, char* err, size_t errlen, const char* format, ...) {
    if (err != nullptr && errlen > 0) {
        va_list args;
        va_start(args, format);
        int n = vsnprintf(err, errlen, format, args);
        va_end(args);
        if (n >= 0 && static_cast<size_t>(n) < errlen) {
            snprintf(err + n, errlen - static_cast<size_t>(n), ": %s (CUresult %d)", cudaText(d, r), r);
        }
    }
    return LUM_ERR_CUDA;
}

// Current makes the model's context current for one call and restores
// the caller's.
struct Current {
    const Driver& d;
    bool pushed;
    Current(const Driver& driver, CUcontext ctx) : d(driver), pushed(ctx != nullptr && driver.cuCtxPushCurrent(ctx) == 0) {}
    ~Current() {
        if (pushed) {
            CUcontext popped = nullptr;
            d.cuCtxPopCurrent(&popped);
        }
    }
    Current(const Current&) = delete;
    Current& operator=(const Current&) = delete;
};

template <typename F>
bool bind(void* lib, F* fn, const char* symbol) {
    void* p = dlsym(lib, symbol);
    *fn = reinterpret_cast<F>(p);
    return p != nullptr;
}

int loadDriver(Driver* d, char* err, size_t errlen) {
    dlerror();
    d->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (d->lib == nullptr) {
        const char* why = dlerror();
        return fail(err, errlen, LUM_ERR_DRIVER, "libcuda.so.1 not found: %s (the NVIDIA driver is not installed)",
                    why != nullptr ? why : "dlopen failed");
    }
    struct Symbol {
        bool ok;
        const char* name;
    };
    const Symbol symbols[] = {
        {bind(d->lib, &d->cuInit, "cuInit"), "cuInit"},
        {bind(d->lib, &d->cuDeviceGet, "cuDeviceGet"), "cuDeviceGet"},
        {bind(d->lib, &d->cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"), "cuDevicePrimaryCtxRetain"},
        {bind(d->lib, &d->cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"), "cuDevicePrimaryCtxRelease_v2"},
        {bind(d->lib, &d->cuCtxPushCurrent, "cuCtxPushCurrent_v2"), "cuCtxPushCurrent_v2"},
        {bind(d->lib, &d->cuCtxPopCurrent, "cuCtxPopCurrent_v2"), "cuCtxPopCurrent_v2"},
        {bind(d->lib, &d->cuCtxSynchronize, "cuCtxSynchronize"), "cuCtxSynchronize"},
        {bind(d->lib, &d->cuModuleLoadData, "cuModuleLoadData"), "cuModuleLoadData"},
        {bind(d->lib, &d->cuModuleUnload, "cuModuleUnload"), "cuModuleUnload"},
        {bind(d->lib, &d->cuModuleGetFunction, "cuModuleGetFunction"), "cuModuleGetFunction"},
        {bind(d->lib, &d->cuMemAlloc, "cuMemAlloc_v2"), "cuMemAlloc_v2"},
        {bind(d->lib, &d->cuMemFree, "cuMemFree_v2"), "cuMemFree_v2"},
        {bind(d->lib, &d->cuMemcpyHtoD, "cuMemcpyHtoD_v2"), "cuMemcpyHtoD_v2"},
        {bind(d->lib, &d->cuMemcpyDtoH, "cuMemcpyDtoH_v2"), "cuMemcpyDtoH_v2"},
        {bind(d->lib, &d->cuMemsetD8, "cuMemsetD8_v2"), "cuMemsetD8_v2"},
        {bind(d->lib, &d->cuLaunchKernel, "cuLaunchKernel"), "cuLaunchKernel"},
        {bind(d->lib, &d->cuGetErrorString, "cuGetErrorString"), "cuGetErrorString"},
    };
    for (const Symbol& s : symbols) {
        if (!s.ok) {
            return fail(err, errlen, LUM_ERR_DRIVER, "libcuda.so.1 lacks %s (the driver is older than CUDA 11)", s.name);
        }
    }
    return LUM_OK;
}

const char* describe(int buffer) {
    static thread_local char text[512];
    const BufferDesc& b = kBuffers[buffer];
    snprintf(text, sizeof text, "%s %s %s", kKindNames[b.kind], b.name, b.type);
    return text;
}

int launch(lum_model* m, int i, const char* caller, char* err, size_t errlen) {
    const LaunchDesc& l = kLaunches[i];
    CUdeviceptr values[kMaxParams + 1];
    void* params[kMaxParams + 1];
    for (int j = 0; j < l.count; j++) {
        values[j] = m->ptr[kLaunchArgs[l.first + j]];
        params[j] = &values[j];
    }
    CUresult r = m->d.cuLaunchKernel(m->fn[l.kernel], l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2],
                                     0, nullptr, params, nullptr);
    if (r != 0) {
        return cudaFail(m->d, r, err, errlen, "cuLaunchKernel %s (%s)", kKernelNames[l.kernel], caller);
    }
    return LUM_OK;
}

int find(Kind kind, const char* name) {
    for (int i = 0; i < kNumBuffers; i++) {
        if (kBuffers[i].kind == kind && strcmp(kBuffers[i].name, name) == 0) {
            return i;
        }
    }
    return -1;
}

// transfer copies a named tensor of one kind to the device (data != nullptr)
// or from it (out != nullptr).
int transfer(lum_model* m, const char* caller, Kind kind, const char* name, const void* data, void* out, size_t bytes,
             char* err, size_t errlen) {
    if (m == nullptr || name == nullptr || (data == nullptr && out == nullptr && bytes > 0)) {
        return fail(err, errlen, LUM_ERR_ARGUMENT, "%s: a NULL model, name or data", caller);
    }
    int i = find(kind, name);
    if (i < 0) {
        return fail(err, errlen, LUM_ERR_ARGUMENT, "%s: the model has no %s named \"%s\"", caller, kKindNames[kind], name);
    }
    if (bytes != kBuffers[i].bytes) {
        return fail(err, errlen, LUM_ERR_ARGUMENT, "%s: %s is %llu bytes, not %zu", caller, describe(i), kBuffers[i].bytes, bytes);
    }
    if (bytes == 0) {
        m->ready[i] = 1;
        return LUM_OK;
    }
    Current current(m->d, m->ctx);
    CUresult r;
    if (out != nullptr) {
        r = m->d.cuMemcpyDtoH(out, m->ptr[i], bytes);
        if (r != 0) {
            return cudaFail(m->d, r, err, errlen, "cuMemcpyDtoH %s (%s)", describe(i), caller);
        }
    } else {
        r = m->d.cuMemcpyHtoD(m->ptr[i], data, bytes);
        if (r != 0) {
            return cudaFail(m->d, r, err, errlen, "cuMemcpyHtoD %s (%s)", describe(i), caller);
        }
    }
    m->ready[i] = 1;
    return LUM_OK;
}

int loadModule(lum_model* m, char* err, size_t errlen) {
    CUresult cubin = 0;
    if (kCUBINBytes > 0) {
        cubin = m->d.cuModuleLoadData(&m->module, kCUBIN);
        if (cubin == 0) {
            m->image = "cubin";
            return LUM_OK;
        }
        m->module = nullptr;
    }
    CUresult r = m->d.cuModuleLoadData(&m->module, kPTX);
    if (r == 0) {
        m->image = "ptx";
        return LUM_OK;
    }
    m->module = nullptr;
    if (kCUBINBytes > 0) {
        char first[256];
        snprintf(first, sizeof first, "%s (CUresult %d)", cudaText(m->d, cubin), cubin);
        return cudaFail(m->d, r, err, errlen, "cuModuleLoadData: the %s CUBIN: %s; the PTX", kArch, first);
    }
    return cudaFail(m->d, r, err, errlen, "cuModuleLoadData (PTX)");
}

int create(lum_model* m, int device, char* err, size_t errlen) {
    int rc = loadDriver(&m->d, err, errlen);
    if (rc != LUM_OK) {
        return rc;
    }
    const Driver& d = m->d;
    CUresult r = d.cuInit(0);
    if (r != 0) {
        return cudaFail(d, r, err, errlen, "cuInit");
    }
    r = d.cuDeviceGet(&m->device, device);
    if (r != 0) {
        return cudaFail(d, r, err, errlen, "cuDeviceGet %d", device);
    }
    r = d.cuDevicePrimaryCtxRetain(&m->ctx, m->device);
    if (r != 0) {
        m->ctx = nullptr;
        return cudaFail(d, r, err, errlen, "cuDevicePrimaryCtxRetain (device %d)", device);
    }
    m->retained = true;
    Current current(d, m->ctx);
    if (!current.pushed) {
        return fail(err, errlen, LUM_ERR_CUDA, "cuCtxPushCurrent_v2: the primary context of device %d", device);
    }
    if ((rc = loadModule(m, err, errlen)) != LUM_OK) {
        return rc;
    }
    for (int k = 0; k < kNumKernels; k++) {
        r = d.cuModuleGetFunction(&m->fn[k], m->module, kKernelNames[k]);
        if (r != 0) {
            return cudaFail(d, r, err, errlen, "cuModuleGetFunction %s", kKernelNames[k]);
        }
    }
    r = d.cuMemAlloc(&m->arena, kArenaBytes > 0 ? kArenaBytes : 1);
    if (r != 0) {
        m->arena = 0;
        return cudaFail(d, r, err, errlen, "cuMemAlloc the arena (%llu bytes)", kArenaBytes);
    }
    for (int i = 0; i < kNumBuffers; i++) {
        const BufferDesc& b = kBuffers[i];
        if (b.kind == kTemp) {
            m->ptr[i] = m->arena + static_cast<CUdeviceptr>(b.offset);
            continue;
        }
        r = d.cuMemAlloc(&m->own[i], b.bytes > 0 ? b.bytes : 1);
        if (r != 0) {
            m->own[i] = 0;
            return cudaFail(d, r, err, errlen, "cuMemAlloc %s (%llu bytes)", describe(i), b.bytes);
        }
        m->ptr[i] = m->own[i];
        if (b.kind == kState && b.bytes > 0) {
            r = d.cuMemsetD8(m->own[i], 0, b.bytes);
            if (r != 0) {
                return cudaFail(d, r, err, errlen, "cuMemsetD8 %s", describe(i));
            }
        }
    }
    return LUM_OK;
}

// uploadConstants copies the constants' bytes to the device.
int uploadConstants(lum_model* m, const char* caller, char* err, size_t errlen) {
    for (int i = 0; i < kNumBuffers; i++) {
        const BufferDesc& b = kBuffers[i];
        if (b.kind == kConstant && b.bytes > 0) {
            CUresult r = m->d.cuMemcpyHtoD(m->ptr[i], b.data, b.bytes);
            if (r != 0) {
                return cudaFail(m->d, r, err, errlen, "cuMemcpyHtoD %s (%s)", describe(i), caller);
            }
        }
    }
    return LUM_OK;
}

// ---- lum_load_prepared: the prepared weights file (safetensors) ----

constexpr unsigned long long kMaxHeaderBytes = 100000000ULL;  // the reference implementation's limit
constexpr unsigned long long kMaxInteger = 9223372036854775807ULL;
constexpr int kMaxRank = 32;
constexpr size_t kStagingBytes = 8u << 20;

// Cursor reads JSON from the header, which it may rewrite: strings are
// decoded in place. why is the first error.
struct Cursor {
    char* p;
    char* start;
    char* end;
    const char* why;
    bool stop(const char* reason) {
        if (why == nullptr) {
            why = reason;
        }
        return false;
    }
};

void space(Cursor& c) {
    while (c.p < c.end && (*c.p == ' ' || *c.p == '\t' || *c.p == '\n' || *c.p == '\r')) {
        c.p++;
    }
}

bool literal(Cursor& c, char ch, const char* reason) {
    space(c);
    if (c.p == c.end || *c.p != ch) {
        return c.stop(reason);
    }
    c.p++;
    return true;
}

// peek skips spaces and reports whether the next character is ch,
// consuming it when it is.
bool peek(Cursor& c, char ch) {
    space(c);
    if (c.p < c.end && *c.p == ch) {
        c.p++;
        return true;
    }
    return false;
}

bool hex4(Cursor& c, const char** r, unsigned* v) {
    if (c.end - *r < 4) {
        return c.stop("a \\u escape cut short");
    }
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char ch = (*r)[i];
        unsigned d;
        if (ch >= '0' && ch <= '9') {
            d = static_cast<unsigned>(ch - '0');
        } else if (ch >= 'a' && ch <= 'f') {
            d = static_cast<unsigned>(ch - 'a' + 10);
        } else if (ch >= 'A' && ch <= 'F') {
            d = static_cast<unsigned>(ch - 'A' + 10);
        } else {
            return c.stop("an invalid \\u escape");
        }
        *v = *v * 16 + d;
    }
    *r += 4;
    return true;
}

// jsonString decodes the string at the cursor in place (the decoded text
// is never longer than its JSON) and NUL-terminates it.
bool jsonString(Cursor& c, char** out) {
    space(c);
    if (c.p == c.end || *c.p != '"') {
        return c.stop("expected a string");
    }
    char* w = c.p;
    const char* r = c.p + 1;
    *out = w;
    for (;;) {
        if (r == c.end) {
            return c.stop("a string is not terminated");
        }
        unsigned char ch = static_cast<unsigned char>(*r);
        if (ch == '"') {
            r++;
            break;
        }
        if (ch < 0x20) {
            return c.stop("a control character in a string");
        }
        if (ch != '\\') {
            *w++ = *r++;
            continue;
        }
        if (++r == c.end) {
            return c.stop("a string is not terminated");
        }
        char e = *r++;
        switch (e) {
        case '"':
        case '\\':
        case '/':
            *w++ = e;
            break;
        case 'b':
            *w++ = '\b';
            break;
        case 'f':
            *w++ = '\f';
            break;
        case 'n':
            *w++ = '\n';
            break;
        case 'r':
            *w++ = '\r';
            break;
        case 't':
            *w++ = '\t';
            break;
        case 'u': {
            unsigned cp;
            if (!hex4(c, &r, &cp)) {
                return false;
            }
            if (cp >= 0xD800 && cp < 0xDC00) {
                unsigned lo;
                if (c.end - r < 2 || r[0] != '\\' || r[1] != 'u') {
                    return c.stop("an unpaired surrogate in a string");
                }
                r += 2;
                if (!hex4(c, &r, &lo)) {
                    return false;
                }
                if (lo < 0xDC00 || lo >= 0xE000) {
                    return c.stop("an unpaired surrogate in a string");
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp < 0xE000) {
                return c.stop("an unpaired surrogate in a string");
            }
            if (cp == 0) {
                return c.stop("a string holds \\u0000");
            }
            if (cp < 0x80) {
                *w++ = static_cast<char>(cp);
            } else if (cp < 0x800) {
                *w++ = static_cast<char>(0xC0 | (cp >> 6));
                *w++ = static_cast<char>(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                *w++ = static_cast<char>(0xE0 | (cp >> 12));
                *w++ = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
                *w++ = static_cast<char>(0x80 | (cp & 0x3F));
            } else {
                *w++ = static_cast<char>(0xF0 | (cp >> 18));
                *w++ = static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
                *w++ = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
                *w++ = static_cast<char>(0x80 | (cp & 0x3F));
            }
            break;
        }
        default:
            return c.stop("an invalid escape in a string");
        }
    }
    *w = '\0';
    c.p = const_cast<char*>(r);
    return true;
}

// jsonInteger reads a non-negative integer below 2^63.
bool jsonInteger(Cursor& c, unsigned long long* v) {
    space(c);
    if (c.p == c.end || *c.p < '0' || *c.p > '9') {
        return c.stop("expected a non-negative integer");
    }
    if (*c.p == '0' && c.p + 1 < c.end && c.p[1] >= '0' && c.p[1] <= '9') {
        return c.stop("a number with a leading zero");
    }
    unsigned long long x = 0;
    while (c.p < c.end && *c.p >= '0' && *c.p <= '9') {
        unsigned d = static_cast<unsigned>(*c.p - '0');
        if (x > (kMaxInteger - d) / 10) {
            return c.stop("a number of 2^63 or more");
        }
        x = x * 10 + d;
        c.p++;
    }
    if (c.p < c.end && (*c.p == '.' || *c.p == 'e' || *c.p == 'E')) {
        return c.stop("expected an integer");
    }
    *v = x;
    return true;
}

// jsonIntegers reads an array of at most max integers.
bool jsonIntegers(Cursor& c, unsigned long long* out, int max, int* n) {
    if (!literal(c, '[', "expected an array")) {
        return false;
    }
    *n = 0;
    if (peek(c, ']')) {
        return true;
    }
    for (;;) {
        unsigned long long v;
        if (!jsonInteger(c, &v)) {
            return false;
        }
        if (*n == max) {
            return c.stop("an array too long");
        }
        out[(*n)++] = v;
        if (peek(c, ',')) {
            continue;
        }
        return literal(c, ']', "expected , or ] in an array");
    }
}

// Objects: objectStart reads '{' and says whether a member follows;
// objectNext reads ',' (another follows) or '}' (none).
bool objectStart(Cursor& c, bool* more) {
    if (!literal(c, '{', "expected an object")) {
        return false;
    }
    *more = !peek(c, '}');
    return true;
}

bool objectNext(Cursor& c, bool* more) {
    if (peek(c, ',')) {
        *more = true;
        return true;
    }
    *more = false;
    return literal(c, '}', "expected , or } in an object");
}

// Entry is one tensor's header record.
struct Entry {
    char* dtype;
    unsigned long long shape[kMaxRank];
    int rank;
    unsigned long long offsets[2];
    int noffsets;
    bool has[3];
};

bool jsonEntry(Cursor& c, Entry* e) {
    bool more;
    if (!objectStart(c, &more)) {
        return false;
    }
    while (more) {
        char* key;
        if (!jsonString(c, &key) || !literal(c, ':', "expected : after a key")) {
            return false;
        }
        int field;
        bool ok;
        if (strcmp(key, "dtype") == 0) {
            field = 0;
            ok = !e->has[0] && jsonString(c, &e->dtype);
        } else if (strcmp(key, "shape") == 0) {
            field = 1;
            ok = !e->has[1] && jsonIntegers(c, e->shape, kMaxRank, &e->rank);
        } else if (strcmp(key, "data_offsets") == 0) {
            field = 2;
            ok = !e->has[2] && jsonIntegers(c, e->offsets, 2, &e->noffsets);
        } else {
            return c.stop("an unknown field (want dtype, shape and data_offsets)");
        }
        if (!ok) {
            return c.stop("a field given twice");  // when no other error was set
        }
        e->has[field] = true;
        if (!objectNext(c, &more)) {
            return false;
        }
    }
    return true;
}

// jsonMetadata reads the "__metadata__" object of strings and finds the
// program digest in it.
bool jsonMetadata(Cursor& c, const char** digest) {
    bool more;
    if (!objectStart(c, &more)) {
        return false;
    }
    while (more) {
        char* key;
        char* value;
        if (!jsonString(c, &key) || !literal(c, ':', "expected : after a key") || !jsonString(c, &value)) {
            return false;
        }
        if (strcmp(key, kDigestKey) == 0) {
            if (*digest != nullptr) {
                return c.stop("two program digests in the metadata");
            }
            *digest = value;
        }
        if (!objectNext(c, &more)) {
            return false;
        }
    }
    return true;
}

// shapeText writes a shape as the library's messages do: [4 64].
void shapeText(char* out, size_t n, const unsigned long long* shape, int rank) {
    size_t at = 0;
    at += static_cast<size_t>(snprintf(out, n, "["));
    for (int i = 0; i < rank && at < n; i++) {
        at += static_cast<size_t>(snprintf(out + at, n - at, i > 0 ? " %llu" : "%llu", shape[i]));
    }
    if (at < n) {
        snprintf(out + at, n - at, "]");
    }
}

// PreparedFile is what one lum_load_prepared call holds; the destructor
// releases it on every path.
struct PreparedFile {
    int fd = -1;
    char* header = nullptr;
    unsigned char* staging = nullptr;
    unsigned long long* begin = nullptr;  // each kStored tensor's data_offsets, once seen
    unsigned long long* end = nullptr;
    bool* seen = nullptr;
    int* order = nullptr;                 // kStored by begin
    PreparedFile() = default;
    PreparedFile(const PreparedFile&) = delete;
    PreparedFile& operator=(const PreparedFile&) = delete;
    ~PreparedFile() {
        if (fd >= 0) {
            close(fd);
        }
        free(header);
        free(staging);
        free(begin);
        free(end);
        free(seen);
        free(order);
    }
};

// readAt reads n bytes at offset off; on failure it returns the reason.
const char* readAt(int fd, void* out, size_t n, unsigned long long off) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, static_cast<char*>(out) + got, n - got, static_cast<off_t>(off + got));
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r < 0) {
            return strerror(errno);
        }
        if (r == 0) {
            return "the file ended early (did it change while it was read?)";
        }
        got += static_cast<size_t>(r);
    }
    return nullptr;
}

int loadPrepared(lum_model* m, const char* path, char* err, size_t errlen) {
    const char* caller = "lum_load_prepared";
    PreparedFile f;
    f.fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f.fd < 0) {
        return fail(err, errlen, LUM_ERR_FILE, "%s: %s: %s", caller, path, strerror(errno));
    }
    struct stat st;
    if (fstat(f.fd, &st) != 0) {
        return fail(err, errlen, LUM_ERR_FILE, "%s: %s: %s", caller, path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) {
        return fail(err, errlen, LUM_ERR_FILE, "%s: %s: not a regular file", caller, path);
    }
    unsigned long long size = static_cast<unsigned long long>(st.st_size);
    if (size < 8) {
        return fail(err, errlen, LUM_ERR_FILE, "%s: %s: %llu bytes, too short for a safetensors file's 8-byte header length",
                    caller, path, size);
    }
    unsigned char prefix[8];
    if (const char* why = readAt(f.fd, prefix, 8, 0)) {
        return fail(err, errlen, LUM_ERR_FILE, "%s: %s: %s", caller, path, why);
    }
    unsigned long long n = 0;
    for (int i = 7; i >= 0; i--) {
        n = n << 8 | prefix[i];
    }
    if (n > kMaxHeaderBytes) {
        return fail(err, errlen, LUM_ERR_FILE, "%s: %s: a header of %llu bytes, more than the %llu a safetensors file may have",
                    caller, path, n, kMaxHeaderBytes);
    }
    if (n > size - 8) {
        return fail(err, errlen, LUM_ERR_FILE, "%s: %s: a header of %llu bytes in a file of %llu (is it truncated?)", caller, path,
                    n, size);
    }
    unsigned long long dataBytes = size - 8 - n;
    f.header = static_cast<char*>(malloc(n + 1));
    f.begin = static_cast<unsigned long long*>(calloc(kNumStored + 1, sizeof *f.begin));
    f.end = static_cast<unsigned long long*>(calloc(kNumStored + 1, sizeof *f.end));
    f.seen = static_cast<bool*>(calloc(kNumStored + 1, sizeof *f.seen));
    f.order = static_cast<int*>(calloc(kNumStored + 1, sizeof *f.order));
    if (f.header == nullptr || f.begin == nullptr || f.end == nullptr || f.seen == nullptr || f.order == nullptr) {
        return fail(err, errlen, LUM_ERR_MEMORY, "%s: %s: out of host memory for a %llu-byte header", caller, path, n);
    }
    if (const char* why = readAt(f.fd, f.header, n, 8)) {
        return fail(err, errlen, LUM_ERR_FILE, "%s: %s: %s", caller, path, why);
    }
    f.header[n] = '\0';

    // The header: every tensor is one of kStored, of its dtype and shape,
    // its bytes inside the data.
    Cursor c{f.header, f.header, f.header + n, nullptr};
    const char* digest = nullptr;
    bool metadata = false;
    const char* tensor = nullptr;  // the entry being read, for messages
    bool more = false;
    bool ok = objectStart(c, &more);
    while (ok && more) {
        char* key;
        tensor = nullptr;
        if (!jsonString(c, &key) || !literal(c, ':', "expected : after a key")) {
            ok = false;
            break;
        }
        if (strcmp(key, "__metadata__") == 0) {
            if (metadata) {
                ok = c.stop("two __metadata__ objects");
                break;
            }
            metadata = true;
            if (!jsonMetadata(c, &digest)) {
                ok = false;
                break;
            }
            ok = objectNext(c, &more);
            continue;
        }
        tensor = key;
        int s = 0;
        while (s < kNumStored && strcmp(kBuffers[kStored[s].buffer].name, key) != 0) {
            s++;
        }
        if (s == kNumStored) {
            return fail(err, errlen, LUM_ERR_FILE, "%s: %s: tensor \"%s\" is not a weight or prepared weight that %s's run reads",
                        caller, path, key, kModelName);
        }
        const StoredDesc& want = kStored[s];
        int b = want.buffer;
        if (f.seen[s]) {
            return fail(err, errlen, LUM_ERR_FILE, "%s: %s: tensor \"%s\" appears twice", caller, path, key);
        }
        Entry e;
        memset(&e, 0, sizeof e);
        if (!jsonEntry(c, &e)) {
            ok = false;
            break;
        }
        const char* fields[3] = {"dtype", "shape", "data_offsets"};
        for (int i = 0; i < 3; i++) {
            if (!e.has[i]) {
                return fail(err, errlen, LUM_ERR_FILE, "%s: %s: tensor \"%s\" has no %s", caller, path, key, fields[i]);
            }
        }
        if (strcmp(e.dtype, want.dtype) != 0) {
            return fail(err, errlen, LUM_ERR_FILE, "%s: %s: tensor \"%s\": dtype %s does not fit the model's %s (%s)", caller, path,
                        key, e.dtype, describe(b), want.dtype);
        }
        bool same = e.rank == want.rank;
        for (int i = 0; same && i < e.rank; i++) {
            same = e.shape[i] == static_cast<unsigned long long>(want.shape[i]);
        }
        if (!same) {
            char text[256];
            shapeText(text, sizeof text, e.shape, e.rank);
            return fail(err, errlen, LUM_ERR_FILE, "%s: %s: tensor \"%s\": shape %s does not fit the model's %s", caller, path, key,
                        text, describe(b));
        }
        if (e.noffsets != 2) {
            return fail(err, errlen, LUM_ERR_FILE, "%s: %s: tensor \"%s\": data_offsets has %d numbers, not 2", caller, path, key,
                        e.noffsets);
        }
        unsigned long long lo = e.offsets[0], hi = e.offsets[1];
        if (lo > hi) {
            return fail(err, errlen, LUM_ERR_FILE, "%s: %s: tensor \"%s\": data_offsets [%llu, %llu] out of order", caller, path, key,
                        lo, hi);
        }
        if (hi > dataBytes) {
            return fail(err, errlen, LUM_ERR_FILE,
                        "%s: %s: tensor \"%s\": data_offsets [%llu, %llu] lie beyond the %llu bytes of data (is the file truncated?)", caller,
                        path, key, lo, hi, dataBytes);
        }
        if (hi - lo != kBuffers[b].bytes) {
            return fail(err, errlen, LUM_ERR_FILE, "%s: %s: tensor \"%s\": data_offsets [%llu, %llu] hold %llu bytes, but the model's %s takes %llu",
                        caller, path, key, lo, hi, hi - lo, describe(b), kBuffers[b].bytes);
        }
        f.seen[s] = true;
        f.begin[s] = lo;
        f.end[s] = hi;
        ok = objectNext(c, &more);
    }
    if (ok) {
        tensor = nullptr;
        space(c);
        if (c.p != c.end) {
            ok = c.stop("bytes after the JSON object");
        }
    }
    if (!ok) {
        long long at = static_cast<long long>(c.p - c.start) + 8;
        if (tensor != nullptr) {
            return fail(err, errlen, LUM_ERR_FILE, "%s: %s: tensor \"%s\": a malformed header at byte %lld: %s", caller, path, tensor,
                        at, c.why != nullptr ? c.why : "invalid JSON");
        }
        return fail(err, errlen, LUM_ERR_FILE, "%s: %s: a malformed header at byte %lld: %s", caller, path, at,
                    c.why != nullptr ? c.why : "invalid JSON");
    }
    if (digest == nullptr) {
        return fail(err, errlen, LUM_ERR_FILE, "%s: %s: no %s in the metadata: not prepared weights that lumsearch compile wrote for %s",
                    caller, path, kDigestKey, kModelName);
    }
    if (strcmp(digest, kProgramDigest) != 0) {
        return fail(err, errlen, LUM_ERR_FILE, "%s: %s: prepared for another program (%s %.80s, this model's %s): compile the model again or use lum_load_weights and lum_prepare",
                    caller, path, kDigestKey, digest, kProgramDigest);
    }
    for (int s = 0; s < kNumStored; s++) {
        if (!f.seen[s]) {
            return fail(err, errlen, LUM_ERR_FILE, "%s: %s: tensor \"%s\" is missing (the model's %s)", caller, path,
                        kBuffers[kStored[s].buffer].name, describe(kStored[s].buffer));
        }
    }
    // The tensors lie one after another from the start of the data to its
    // end, as the format requires: no overlap, no gap.
    for (int s = 0; s < kNumStored; s++) {
        int j = s;
        for (; j > 0; j--) {
            int o = f.order[j - 1];
            if (f.begin[o] < f.begin[s] || (f.begin[o] == f.begin[s] && f.end[o] <= f.end[s])) {
                break;
            }
            f.order[j] = o;
        }
        f.order[j] = s;
    }
    unsigned long long at = 0;
    for (int k = 0; k < kNumStored; k++) {
        int s = f.order[k];
        if (f.begin[s] != at) {
            return fail(err, errlen, LUM_ERR_FILE, "%s: %s: tensor \"%s\": data_offsets [%llu, %llu] %s the tensor before it, which ends at %llu",
                        caller, path, kBuffers[kStored[s].buffer].name, f.begin[s], f.end[s], f.begin[s] < at ? "overlap" : "leave a gap after",
                        at);
        }
        at = f.end[s];
    }
    if (at != dataBytes) {
        return fail(err, errlen, LUM_ERR_FILE, "%s: %s: %llu bytes after the last tensor", caller, path, dataBytes - at);
    }

    // The upload. From here on a failure leaves the model unprepared.
    unsigned long long largest = 1;
    for (int s = 0; s < kNumStored; s++) {
        largest = kBuffers[kStored[s].buffer].bytes > largest ? kBuffers[kStored[s].buffer].bytes : largest;
    }
    size_t chunk = largest < kStagingBytes ? static_cast<size_t>(largest) : kStagingBytes;
    f.staging = static_cast<unsigned char*>(malloc(chunk));
    if (f.staging == nullptr) {
        return fail(err, errlen, LUM_ERR_MEMORY, "%s: out of host memory", caller);
    }
    m->prepared = false;
    Current current(m->d, m->ctx);
    int rc = uploadConstants(m, caller, err, errlen);
    if (rc != LUM_OK) {
        return rc;
    }
    for (int k = 0; k < kNumStored; k++) {
        int s = f.order[k];
        int b = kStored[s].buffer;
        bool boolean = strcmp(kStored[s].dtype, "BOOL") == 0;
        unsigned long long done = 0, total = kBuffers[b].bytes;
        while (done < total) {
            size_t step = total - done < chunk ? static_cast<size_t>(total - done) : chunk;
            if (const char* why = readAt(f.fd, f.staging, step, 8 + n + f.begin[s] + done)) {
                return fail(err, errlen, LUM_ERR_FILE, "%s: %s: tensor \"%s\": %s", caller, path, kBuffers[b].name, why);
            }
            for (size_t i = 0; boolean && i < step; i++) {
                if (f.staging[i] > 1) {
                    return fail(err, errlen, LUM_ERR_FILE, "%s: %s: tensor \"%s\": BOOL element %llu is %d, not 0 or 1", caller, path,
                                kBuffers[b].name, done + i, f.staging[i]);
                }
            }
            CUresult r = m->d.cuMemcpyHtoD(m->ptr[b] + done, f.staging, step);
            if (r != 0) {
                return cudaFail(m->d, r, err, errlen, "cuMemcpyHtoD %s (%s)", describe(b), caller);
            }
            done += step;
        }
        m->ready[b] = 1;
    }
    m->prepared = true;
    return LUM_OK;
}

}  // namespace

extern "C" {

size_t lum_tensor_count(void) { return kNumTensors; }

const lum_tensor_info* lum_tensor(size_t i) { return i < kNumTensors ? &kTensors[i] : nullptr; }

int lum_create(lum_model** out, char* err, size_t errlen) { return lum_create_on(out, 0, err, errlen); }

int lum_create_on(lum_model** out, int device, char* err, size_t errlen) {
    if (out == nullptr) {
        return fail(err, errlen, LUM_ERR_ARGUMENT, "lum_create: out is NULL");
    }
    *out = nullptr;
    if (kPTXBytes == 0) {
        return fail(err, errlen, LUM_ERR_NO_KERNELS,
                    "the model was compiled without NVRTC: no kernels embedded (compile %s where libnvrtc is installed)", kModelName);
    }
    lum_model* m = static_cast<lum_model*>(calloc(1, sizeof(lum_model)));
    if (m == nullptr) {
        return fail(err, errlen, LUM_ERR_MEMORY, "lum_create: out of host memory");
    }
    int rc = create(m, device, err, errlen);
    if (rc != LUM_OK) {
        lum_destroy(m);
        return rc;
    }
    *out = m;
    return LUM_OK;
}

int lum_load_weights(lum_model* m, const char* name, const void* data, size_t bytes, char* err, size_t errlen) {
    int rc = transfer(m, "lum_load_weights", kWeight, name, data, nullptr, bytes, err, errlen);
    if (rc == LUM_OK) {
        m->prepared = false;
    }
    return rc;
}

int lum_prepare(lum_model* m, char* err, size_t errlen) {
    if (m == nullptr) {
        return fail(err, errlen, LUM_ERR_ARGUMENT, "lum_prepare: the model is NULL");
    }
    for (int i = 0; i < kNumBuffers; i++) {
        if (kBuffers[i].kind == kWeight && !m->ready[i]) {
            return fail(err, errlen, LUM_ERR_ORDER, "lum_prepare: weight %s was not loaded (lum_load_weights)", kBuffers[i].name);
        }
    }
    Current current(m->d, m->ctx);
    int rc = uploadConstants(m, "lum_prepare", err, errlen);
    if (rc != LUM_OK) {
        return rc;
    }
    for (int i = 0; i < kNumPrep; i++) {
        rc = launch(m, i, "lum_prepare", err, errlen);
        if (rc != LUM_OK) {
            return rc;
        }
    }
    CUresult r = m->d.cuCtxSynchronize();
    if (r != 0) {
        return cudaFail(m->d, r, err, errlen, "cuCtxSynchronize (lum_prepare)");
    }
    m->prepared = true;
    return LUM_OK;
}

int lum_load_prepared(lum_model* m, const char* path, char* err, size_t errlen) {
    if (m == nullptr || path == nullptr) {
        return fail(err, errlen, LUM_ERR_ARGUMENT, "lum_load_prepared: a NULL model or path");
    }
    return loadPrepared(m, path, err, errlen);
}

int lum_set_input(lum_model* m, const char* name, const void* data, size_t bytes, char* err, size_t errlen) {
    return transfer(m, "lum_set_input", kInput, name, data, nullptr, bytes, err, errlen);
}

int lum_run(lum_model* m, char* err, size_t errlen) {
    if (m == nullptr) {
        return fail(err, errlen, LUM_ERR_ARGUMENT, "lum_run: the model is NULL");
    }
    if (!m->prepared) {
        return fail(err, errlen, LUM_ERR_ORDER,
                    "lum_run: the model is not prepared (lum_prepare after loading every weight, or lum_load_prepared)");
    }
    for (int i = 0; i < kNumBuffers; i++) {
        if (kBuffers[i].kind == kInput && !m->ready[i]) {
            return fail(err, errlen, LUM_ERR_ORDER, "lum_run: input %s was not set (lum_set_input)", kBuffers[i].name);
        }
    }
    Current current(m->d, m->ctx);
    for (int i = kNumPrep; i < kNumLaunches; i++) {
        int rc = launch(m, i, "lum_run", err, errlen);
        if (rc != LUM_OK) {
            return rc;
        }
    }
    CUresult r = m->d.cuCtxSynchronize();
    if (r != 0) {
        return cudaFail(m->d, r, err, errlen, "cuCtxSynchronize (lum_run)");
    }
    return LUM_OK;
}

int lum_get_output(lum_model* m, const char* name, void* data, size_t bytes, char* err, size_t errlen) {
    if (data == nullptr && bytes > 0) {
        return fail(err, errlen, LUM_ERR_ARGUMENT, "lum_get_output: data is NULL");
    }
    return transfer(m, "lum_get_output", kOutput, name, nullptr, data, bytes, err, errlen);
}

int lum_get_state(lum_model* m, const char* name, void* data, size_t bytes, char* err, size_t errlen) {
    if (data == nullptr && bytes > 0) {
        return fail(err, errlen, LUM_ERR_ARGUMENT, "lum_get_state: data is NULL");
    }
    return transfer(m, "lum_get_state", kState, name, nullptr, data, bytes, err, errlen);
}

int lum_set_state(lum_model* m, const char* name, const void* data, size_t bytes, char* err, size_t errlen) {
    return transfer(m, "lum_set_state", kState, name, data, nullptr, bytes, err, errlen);
}

const char* lum_module_image(const lum_model* m) { return m != nullptr && m->image != nullptr ? m->image : ""; }

void lum_destroy(lum_model* m) {
    if (m == nullptr) {
        return;
    }
    if (m->ctx != nullptr) {
        Current current(m->d, m->ctx);
        for (int i = 0; i < kNumBuffers; i++) {
            if (m->own[i] != 0) {
                m->d.cuMemFree(m->own[i]);
            }
        }
        if (m->arena != 0) {
            m->d.cuMemFree(m->arena);
        }
        if (m->module != nullptr) {
            m->d.cuModuleUnload(m->module);
        }
    }
    if (m->retained) {
        m->d.cuDevicePrimaryCtxRelease(m->device);
    }
    if (m->d.lib != nullptr) {
        dlclose(m->d.lib);
    }
    free(m);
}

}  // extern "C"
`
