package cuda

// hostRuntimeSource begins the part of model.cpp that follows the tables:
// it closes the namespace of hostSourcePrefix's declarations, defines the
// lum_model struct, and, in an anonymous namespace that hostCAPISource
// closes, the runtime's helpers: error reporting, loading the CUDA driver,
// launching a kernel, finding and transferring named tensors, loading the
// module, creating a model and uploading its constants.
const hostRuntimeSource = `
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
    unsigned char* shadow[kNumBuffers + 1];  // host copies of metadata inputs: paged attention's (kPaged), a serving step's (kStep)
    long long tokens, seqs;  // a serving step's T and S, once checkStep accepted its metadata: the grids of kLaunches' rows follow them
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
    int kernel = l.kernel;
    unsigned int grid[3] = {l.grid[0], l.grid[1], l.grid[2]};
    unsigned int block[3] = {l.block[0], l.block[1], l.block[2]};
    int rowDim = l.rowDim;
    long long rowNum = l.rowNum, rowDen = l.rowDen;
    long long rows = l.rowSeqs ? m->seqs : m->tokens;
    for (int j = 0; j < l.numBuckets; j++) {
        const BucketDesc& b = kBuckets[l.firstBucket + j];
        if (rows <= b.hi) {
            kernel = b.kernel;
            for (int d = 0; d < 3; d++) {
                grid[d] = b.grid[d];
                block[d] = b.block[d];
            }
            rowDim = b.rowDim;
            rowNum = b.rowNum;
            rowDen = b.rowDen;
            break;
        }
    }
    if (rowDim >= 0) {
        // A row-wise kernel of a serving step: blocks for the T tokens
        // (or S sequences) present, never more than its grid for the
        // maximum.
        long long n = (rows * rowNum + rowDen - 1) / rowDen;
        grid[rowDim] = (unsigned int)(n < 1 ? 1 : n < (long long)grid[rowDim] ? n : (long long)grid[rowDim]);
    }
    CUresult r = m->d.cuLaunchKernel(m->fn[kernel], grid[0], grid[1], grid[2], block[0], block[1], block[2],
                                     0, nullptr, params, nullptr);
    if (r != 0) {
        return cudaFail(m->d, r, err, errlen, "cuLaunchKernel %s (%s)", kKernelNames[kernel], caller);
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

// pagedBuffer says buffer i holds a paged attention's metadata, whose
// host copy lum_set_input keeps for lum_run's check.
bool pagedBuffer(int i) {
    for (int p = 0; p < kNumPaged; p++) {
        for (int k = 0; k < 4; k++) {
            if (kPaged[p].buffer[k] == i) {
                return true;
            }
        }
    }
    return false;
}

// checkPaged checks one paged attention's metadata as ir.PagedTokens
// does: seqs within the table's rows, query starts from 0 that never
// decrease and stay within the tokens, lengths that hold their tokens and
// fit a table row, and every cached position's block within the pool.
int checkPaged(const lum_model* m, const PagedDesc& pd, char* err, size_t errlen) {
    auto at = [&](int k, long long j) -> long long {
        const unsigned char* p = m->shadow[pd.buffer[k]] + j * pd.size[k];
        if (pd.size[k] == 8) {
            int64_t x;
            memcpy(&x, p, 8);
            return x;
        }
        int32_t x;
        memcpy(&x, p, 4);
        return x;
    };
    const char* what = "lum_run: paged attention metadata";
    long long seqs = at(3, 0);
    if (seqs < 0 || seqs > pd.rows) {
        return fail(err, errlen, LUM_ERR_ARGUMENT, "%s: %lld sequences present; the block table has %lld rows", what, seqs, pd.rows);
    }
    if (long long v = at(2, 0); v != 0) {
        return fail(err, errlen, LUM_ERR_ARGUMENT, "%s: query start of sequence 0 is %lld; want 0", what, v);
    }
    for (long long s = 0; s < seqs; s++) {
        long long q0 = at(2, s), q1 = at(2, s + 1);
        if (q1 < q0 || q1 > pd.tokens) {
            return fail(err, errlen, LUM_ERR_ARGUMENT, "%s: query starts of sequence %lld are %lld..%lld; want non-decreasing starts within %lld tokens",
                        what, s, q0, q1, pd.tokens);
        }
        long long L = at(1, s), ctx = L - (q1 - q0);
        if (ctx < 0) {
            return fail(err, errlen, LUM_ERR_ARGUMENT, "%s: sequence %lld has length %lld, shorter than its %lld tokens in the step", what, s, L, q1 - q0);
        }
        if (long long need = (L + pd.block - 1) / pd.block; need > pd.cols) {
            return fail(err, errlen, LUM_ERR_ARGUMENT, "%s: sequence %lld has length %lld, which needs %lld blocks; the block table holds %lld",
                        what, s, L, need, pd.cols);
        }
        for (long long j = 0; j * pd.block < ctx; j++) {
            long long b = at(0, s * pd.cols + j);
            if (b < 0 || (b + 1) * pd.block > pd.slots) {
                return fail(err, errlen, LUM_ERR_ARGUMENT, "%s: sequence %lld: block %lld of its table is %lld, outside the pool's %lld blocks",
                            what, s, j, b, pd.slots / pd.block);
            }
        }
    }
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

`
