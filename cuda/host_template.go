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
#include <stdint.h>
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

// A runtime extent (a decode step's past): the integer scalar input
// buffer that carries it and the range the program was compiled for.
struct SymbolDesc {
    int buffer;                   // in kBuffers
    long long lo, hi;
};
` + hostStepDecl + `

// A paged attention's metadata given as inputs (block table, sequence
// lengths, query starts, sequence count: buffers in kBuffers, elements of
// size bytes), and the shapes it must fit: tokens, table rows and
// columns, pool slots, the block size. lum_run checks it before any
// launch, as ir.PagedTokens does: the kernels trust it.
struct PagedDesc {
    int buffer[4];
    int size[4];
    long long tokens, rows, cols, slots, block;
};

struct LaunchDesc {
    int kernel;                   // in kKernelNames
    unsigned int grid[3], block[3];
    int first, count;             // its buffers in kLaunchArgs
    int rowDim;                   // -1, or the grid axis that follows a step's T (S with rowSeqs):
    long long rowNum, rowDen;     // ceil(T * rowNum / rowDen) blocks, at most grid[rowDim]
    bool rowSeqs;
    int firstBucket, numBuckets;  // its row buckets in kBuckets (none: its own kernel serves every T)
};

// A row-wise launch's kernel by the rows present: the first bucket whose hi
// holds T (S with rowSeqs), each a kernel printed for that many rows in the
// schedule the cost model ranked best there.
struct BucketDesc {
    long long hi;
    int kernel;                   // in kKernelNames
    unsigned int grid[3], block[3];
    int rowDim;
    long long rowNum, rowDen;
};

struct StoredDesc {
    int buffer;                   // in kBuffers
    const char* dtype;            // its safetensors dtype: F32, F16, BF16, I32, I64 or BOOL
    int rank;
    const long long* shape;       // rank dimensions; nullptr when rank is 0
};
`

// hostSourceSuffix is what follows the tables in model.cpp: the runtime,
// lum_load_prepared's reader of prepared weights files, a serving step's
// metadata check, and the C API, each in a file of its own.
const hostSourceSuffix = hostRuntimeSource + hostJSONSource + hostPreparedSource + hostStepSource + hostCAPISource
