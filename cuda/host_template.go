package cuda

// The fixed parts of the host library that HostLibrary writes around a
// model's tables: model.h's documentation and API, and model.cpp's driver
// declarations and implementation. The generated tables between
// hostSourcePrefix and hostSourceSuffix define kModelName, kArch,
// kArenaBytes, kNumBuffers, kNumKernels, kNumPrep, kNumLaunches,
// kMaxParams, kBuffers, kNumTensors, kTensors, kKernelNames,
// kLaunchArgs, kLaunches, kPTX, kPTXBytes, kCUBIN and kCUBINBytes.

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
 *     lum_set_input  ...          per run: every input
 *     lum_run                     the run's kernels, in order, then waits
 *     lum_get_output ...          the results
 *     lum_destroy
 * States (decode caches) start zeroed, persist across runs and are
 * rewritten in place by lum_run; lum_get_state and lum_set_state read and
 * replace them. Loading a weight again after lum_prepare requires another
 * lum_prepare before the next run.
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
    LUM_ERR_MEMORY = 6      /* host memory */
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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    for (int i = 0; i < kNumBuffers; i++) {
        const BufferDesc& b = kBuffers[i];
        if (b.kind == kConstant && b.bytes > 0) {
            CUresult r = m->d.cuMemcpyHtoD(m->ptr[i], b.data, b.bytes);
            if (r != 0) {
                return cudaFail(m->d, r, err, errlen, "cuMemcpyHtoD %s (lum_prepare)", describe(i));
            }
        }
    }
    for (int i = 0; i < kNumPrep; i++) {
        int rc = launch(m, i, "lum_prepare", err, errlen);
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

int lum_set_input(lum_model* m, const char* name, const void* data, size_t bytes, char* err, size_t errlen) {
    return transfer(m, "lum_set_input", kInput, name, data, nullptr, bytes, err, errlen);
}

int lum_run(lum_model* m, char* err, size_t errlen) {
    if (m == nullptr) {
        return fail(err, errlen, LUM_ERR_ARGUMENT, "lum_run: the model is NULL");
    }
    if (!m->prepared) {
        return fail(err, errlen, LUM_ERR_ORDER, "lum_run: the model is not prepared (lum_prepare after loading every weight)");
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
