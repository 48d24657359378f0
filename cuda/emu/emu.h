// emu.h: the CUDA C subset that lumsearch generates, defined in plain C++17 so
// that g++ compiles the generated kernel text unchanged and runs it on the CPU.
//
// Execution model. One OS worker thread runs one thread block at a time. Every
// CUDA thread of the block is a user-level fiber with its own stack; a fiber
// runs until it reaches a scheduling point (__syncthreads, a warp collective,
// or its return) and then switches back to the worker's scheduler with the
// hand-written context switch below. The scheduler runs every runnable fiber
// once per pass (in thread order, or in a freshly permuted order at every pass
// in shuffled mode), then resolves what the waiting fibers wait for: a warp
// collective completes when every live thread named in its mask has reached
// it, __syncthreads completes when every live thread of the block has reached
// the same __syncthreads. When nothing can complete, the block is deadlocked
// and the process reports it with the block and thread ids instead of hanging.
//
// __shared__ is `static thread_local`. That is correct because all fibers of a
// block run on the same OS thread (they see one instance, as the threads of a
// block see one shared memory), a worker runs one block at a time (no two live
// blocks share an instance), and different workers have different instances.
// Real shared memory holds garbage at block start; here every block starts
// with its shared variables poisoned (the NaN pattern), so that reading a slot
// no thread of the block wrote is seen. To find them, the variables are placed
// in their own TLS sections: "lum_emu_shared_<i>" for the kernel of launcher
// i (the generated glue redefines __shared__ before each kernel) and
// "lum_emu_shared" for any text before the first kernel; the runner maps the
// sections' bounds (__start_ and __stop_ symbols) into each worker's TLS
// block.
//
// The host side (buffers with guard pages, signals, workers, I/O) is in
// runner.inc; the Go package cuda/emu generates the launchers and main.
#pragma once

#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#if !defined(__x86_64__) && !defined(__aarch64__)
#error "lumsearch emu.h: no fiber context switch for this architecture (ports: x86-64, aarch64)"
#endif

// ---------------------------------------------------------------- keywords

#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
// LUM_EMU_SHARED_IN places a shared variable in a poisoned section (above).
#define LUM_EMU_SHARED_IN(section_name) static thread_local __attribute__((section(section_name)))
#define __shared__ LUM_EMU_SHARED_IN("lum_emu_shared")
// __restrict__ is a g++ keyword already.

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct __align__(16) float4 { float x, y, z, w; };
struct __align__(8) float2 { float x, y; };
struct __align__(16) int4 { int x, y, z, w; };
struct __align__(8) int2 { int x, y; };
struct __align__(16) uint4 { unsigned x, y, z, w; };
struct __align__(8) uint2 { unsigned x, y; };
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
inline float2 make_float2(float x, float y) { return float2{x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return int4{x, y, z, w}; }
inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return uint3{x, y, z}; }

// The built-in index variables. threadIdx is rewritten by the scheduler every
// time it switches into a fiber; the others are per worker (per block, per
// launch). All fibers of a block share their OS thread, so thread_local is
// exactly per block here.
inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;
constexpr int warpSize = 32;

// ---------------------------------------------------------------- math

inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
inline unsigned __float_as_uint(float f) { unsigned i; memcpy(&i, &f, 4); return i; }
inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
inline float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }
// Byte n of the result is byte s<4n+2:4n> of the eight bytes y:x (x's
// the low four), as CUDA's __byte_perm.
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const uint64_t v = (uint64_t(y) << 32) | x;
  unsigned r = 0;
  for (int n = 0; n < 4; n++) r |= unsigned((v >> (8 * ((s >> (4 * n)) & 7u))) & 0xffu) << (8 * n);
  return r;
}
template <typename T> inline T __ldg(const T* p) { return *p; }

// ---------------------------------------------------------------- f16, bf16

// Storage types: 16 raw bits, as in the NVRTC prelude (package cuda).
typedef unsigned short lum_f16;
typedef unsigned short lum_bf16;

inline float lum_emu_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
inline uint32_t lum_emu_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

inline float lum_f16_to_f32(lum_f16 h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 0x1f) return lum_emu_bits_f32(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    if (m == 0) return lum_emu_bits_f32(sign);
    e = 113;  // subnormal: m * 2^-24; normalize the mantissa
    while (!(m & 0x400)) { m <<= 1; e--; }
    return lum_emu_bits_f32(sign | (e << 23) | ((m & 0x3ff) << 13));
  }
  return lum_emu_bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

// Round to nearest, ties to even; NaN becomes the canonical 0x7fff, as
// cvt.rn.f16.f32 and cuda_fp16's __float2half_rn do.
inline lum_f16 lum_f32_to_f16(float f) {
  uint32_t x = lum_emu_f32_bits(f);
  uint16_t sign = uint16_t((x >> 16) & 0x8000);
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return lum_f16(0x7fff);
  if (ax >= 0x477ff000u) return lum_f16(sign | 0x7c00);  // >= 65520 (and inf)
  if (ax < 0x38800000u) {                                          // below 2^-14
    if (ax <= 0x33000000u) return lum_f16(sign);                   // <= 2^-25: ties to 0
    uint32_t e = ax >> 23, m = (ax & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - e, k = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (k & 1))) k++;
    return lum_f16(sign | k);
  }
  uint32_t r = ax - 0x38000000u, h = r >> 13, rem = r & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
  return lum_f16(sign | h);
}

inline float lum_bf16_to_f32(lum_bf16 h) { return lum_emu_bits_f32(uint32_t(h) << 16); }
// Quantized weights' element codes (package quant): OCP MX e2m1 and e8m0,
// OCP FP8 e4m3, and the 4-bit fields of AWQ's and GPTQ's 32-bit words.
__device__ __forceinline__ float lum_e2m1_to_f32(unsigned c) {
  unsigned e = (c >> 1) & 3u, m = c & 1u;
  unsigned bits = e ? (((e + 126u) << 23) | (m << 22)) : (m ? 0x3f000000u : 0u);
  return __uint_as_float(bits | ((c & 8u) << 28));
}
__device__ __forceinline__ float lum_e8m0_to_f32(unsigned s) {
  return __uint_as_float(s == 255u ? 0x7fffffffu : (s ? (s << 23) : 0x00400000u));
}
__device__ __forceinline__ float lum_e4m3_to_f32(unsigned c) {
  unsigned e = (c >> 3) & 15u, m = c & 7u;
  float v = e ? __uint_as_float(((e + 120u) << 23) | (m << 20)) : (float)m * 0.001953125f;
  if ((c & 0x7fu) == 0x7fu) v = __uint_as_float(0x7fffffffu);
  return (c & 0x80u) ? -v : v;
}
__device__ __forceinline__ unsigned lum_awq_nibble(unsigned w, unsigned j) {
  return (w >> (((j & 1u) << 4) | ((j >> 1) << 2))) & 15u;
}
__device__ __forceinline__ unsigned lum_gptq_nibble(unsigned w, unsigned j) {
  return (w >> (j << 2)) & 15u;
}
__device__ __forceinline__ float lum_round_e4m3(float x) {
  // Saturate at 448, then round to e4m3's grid: 2^(e-3) apart at
  // exponent e, 2^-9 apart below 2^-6; rintf rounds ties to even, which
  // is the even code.
  float a = fabsf(x);
  if (a != a) return x;
  if (a >= 448.0f) return copysignf(448.0f, x);
  int e;
  frexpf(a, &e);
  float q = ldexpf(1.0f, (e - 1 < -6 ? -6 : e - 1) - 3);
  return copysignf(rintf(a / q) * q, x);
}
// A quantized weight's codes decoded from whole words in registers (the
// matrix-vector kernel's 16-byte loads): an e2m1 (e4m3) code in a word's
// top 4 (8) bits to its value, its bits put in an f32's sign, exponent and
// mantissa and the exponent biases' difference multiplied in (exact; e4m3's
// NaN codes are the caller's to test); and byte b of a word of 4-bit codes
// less their zero points plus 16 (one a byte) to that difference, the byte
// put in the mantissa of 2^23.
__device__ __forceinline__ float lum_e2m1_top(unsigned t) {
  return __uint_as_float((unsigned)((int)t >> 6) & 0x81c00000u) * __uint_as_float(0x7e800000u);
}
__device__ __forceinline__ float lum_e4m3_top(unsigned t) {
  return __uint_as_float((unsigned)((int)t >> 4) & 0x87f00000u) * __uint_as_float(0x7b800000u);
}
__device__ __forceinline__ float lum_q4_byte(unsigned d, unsigned b) {
  return __uint_as_float(__byte_perm(d, 0x4b000000u, 0x7650u | b)) - 8388624.0f;
}
// A 4-bit code in byte b of d (the other bits of the byte clear), decoded
// with its column's scale s and biased zero point zb = -(128 + z) s in
// one multiply-add: the byte in the mantissa of 128 gives 128 + q, and
// (128 + q) s + zb = (q - z) s exactly when zb is (the fma rounds once,
// an exact result).
// The NVRTC prelude's barrier to rematerialization: x itself.
inline float lum_keep(float x) { return x; }
__device__ __forceinline__ float lum_q4_fma(unsigned d, unsigned b, float s, float zb) {
  return __fmaf_rn(__uint_as_float(__byte_perm(d, 0x43000000u, 0x7044u | (b << 8))), s, zb);
}
// The same byte as 128 + q, exactly (the tensor-core tiles' decode:
// (128 + q) - (128 + z) is q - z, exact, then times the scale as the
// reference multiplies it, infinite and NaN scales included).
__device__ __forceinline__ float lum_q4_128(unsigned d, unsigned b) {
  return __uint_as_float(__byte_perm(d, 0x43000000u, 0x7044u | (b << 8)));
}
// Decoding a 16-byte load of codes in registers (the experts kernels):
// one of its words, and one code of a word exactly, its sign, exponent
// and mantissa put where an f32's sign, lowest exponent bits and top
// mantissa bits are (an arithmetic shift carries the sign down, a mask
// clears its copies), which makes the code's value 2^126 (e2m1) or 2^120
// (e4m3) times too small, subnormal where the code's own is; e4m3's
// S.1111.111 is NaN.
__device__ __forceinline__ unsigned lum_u4_word(uint4 q, int i) {
  return i == 0 ? q.x : i == 1 ? q.y : i == 2 ? q.z : q.w;
}
__device__ __forceinline__ float lum_e2m1_in(unsigned w, int n) {
  return lum_e2m1_top(w << (28 - 4 * n));
}
__device__ __forceinline__ float lum_e4m3_in(unsigned w, int b) {
  const unsigned t = w << (24 - 8 * b);
  return (t & 0x7f000000u) == 0x7f000000u ? __uint_as_float(0x7fffffffu) : lum_e4m3_top(t);
}

// Round to nearest, ties to even; NaN becomes the canonical 0x7fff.
inline lum_bf16 lum_f32_to_bf16(float f) {
  uint32_t x = lum_emu_f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return lum_bf16(0x7fff);
  x += 0x7fffu + ((x >> 16) & 1);
  return lum_bf16(x >> 16);
}

// ---------------------------------------------------------------- errors

namespace lum_emu {

// Set by the runner for the launch in progress; read by fail().
inline const char* g_kernel = "?";
inline int g_launch = -1;
// Describes an address (which buffer, which offset) for error messages.
inline void (*g_describe)(const void* p, char* buf, size_t n) = nullptr;

struct Worker;
inline thread_local Worker* tl_worker = nullptr;
inline int g_failed = 0;

// fail_msg writes one error line on stderr and ends the process. The line is
// tab-separated so that the Go side can parse it:
//   LUMEMU <kind> <launch> <kernel> <block x,y,z or -> <thread x,y,z or -> <message>
// Only the first failing worker writes; the others wait for the exit. It is
// called from signal handlers too, so it avoids malloc.
[[noreturn]] inline void fail_msg(const char* kind, const uint3* block, const uint3* thread, const char* msg) {
  if (__atomic_exchange_n(&g_failed, 1, __ATOMIC_SEQ_CST)) {
    for (;;) pause();
  }
  static char line[16384];
  char b[64] = "-", t[64] = "-";
  if (block) snprintf(b, sizeof b, "%u,%u,%u", block->x, block->y, block->z);
  if (thread) snprintf(t, sizeof t, "%u,%u,%u", thread->x, thread->y, thread->z);
  int n = snprintf(line, sizeof line, "LUMEMU\t%s\t%d\t%s\t%s\t%s\t%s", kind, g_launch, g_kernel, b, t, msg);
  if (n < 0) n = 0;
  if (n > int(sizeof line) - 2) n = int(sizeof line) - 2;
  for (int i = 0; i < n; i++)
    if (line[i] == '\n') line[i] = ' ';
  line[n++] = '\n';
  for (int off = 0; off < n;) {
    ssize_t w = write(2, line + off, size_t(n - off));
    if (w <= 0) break;
    off += int(w);
  }
  _exit(3);
}

[[noreturn]] inline void vfail_at(const char* kind, const uint3* block, const uint3* thread, const char* fmt,
                                  va_list ap) {
  static char msg[16000];
  vsnprintf(msg, sizeof msg, fmt, ap);
  fail_msg(kind, block, thread, msg);
}

inline bool in_fiber();

// fail reports an error of the running thread (block and thread ids when a
// fiber is running, the block alone in the scheduler).
[[noreturn]] inline void fail(const char* kind, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  uint3 b = blockIdx, t = threadIdx;
  bool blk = tl_worker != nullptr;
  vfail_at(kind, blk ? &b : nullptr, blk && in_fiber() ? &t : nullptr, fmt, ap);
}

// ---------------------------------------------------------------- fibers

extern "C" void lum_emu_switch(void** save_sp, void* load_sp);
extern "C" void lum_emu_fiber_start();

enum class State : uint8_t { Runnable, Barrier, Warp, Exited };
enum WarpOp : int {
  OpShflIdx,
  OpShflUp,
  OpShflDown,
  OpShflXor,
  OpBallot,
  OpAny,
  OpAll,
  OpSyncwarp,
  OpMmaF16,   // lum_mma_m16n8k16_f16
  OpMmaBF16,  // lum_mma_m16n8k16_bf16
  kWarpOps
};
inline const char* const kWarpOpName[] = {"__shfl_sync",    "__shfl_up_sync",       "__shfl_down_sync",
                                          "__shfl_xor_sync", "__ballot_sync",        "__any_sync",
                                          "__all_sync",      "__syncwarp",           "lum_mma_m16n8k16_f16",
                                          "lum_mma_m16n8k16_bf16"};

// MmaLane is one lane's operands of a warp-wide mma: pointers into the
// calling fiber's stack, valid while it waits in the collective.
struct MmaLane {
  const unsigned* a;  // 4 registers of A, two halves each
  const unsigned* b;  // 2 registers of B
  float* c;           // 4 accumulators, read and written
};

// kCpAsyncMax bounds the cp.async copies one thread may have issued and not
// yet waited for.
constexpr int kCpAsyncMax = 64;

// Landing is when a cp.async copy lands in shared memory (emu.Landing in Go):
// at the wait that completes its group (the latest moment the PTX ISA
// allows, which shows a wait that does not cover a copy), at once (the
// earliest, which shows a refill of a buffer other threads still read), or
// at a seeded moment between: at issue or at any scheduling point of the
// issuing thread.
enum class Landing : uint8_t { AtWait, AtIssue, Between };

// CpCopy is one cp.async copy issued and not yet waited for.
struct CpCopy {
  void* dst;
  const void* src;
  uint32_t group;  // the thread's cp.async-group it belongs to (== Fiber::cp_groups while uncommitted)
  bool landed;     // already copied (Landing::AtIssue or Between)
};

struct Fiber {
  void* sp;         // saved stack pointer while switched out
  char* stack_top;  // highest address of its stack (16-byte aligned)
  uint3 tid;
  int linear;
  State state;
  int site;  // __syncthreads line while State::Barrier
  // The warp collective in progress while State::Warp.
  int op, arg, width;
  unsigned mask;
  bool wide;  // a 64-bit value (poisoned with kPoison64)
  uint64_t value, result;
  const MmaLane* mma;  // the lane's operands while in an mma collective
  // cp.async copies issued and not yet waited for, in issue order, and the
  // number of cp.async-groups the thread has committed (PTX ISA
  // cp.async.commit_group: groups are per thread).
  int ncp;
  uint32_t cp_groups;
  CpCopy* cp;  // kCpAsyncMax slots in Worker::copies, apart so that a fiber stays two cache lines
};

struct ArgVal {
  void* p;
  long long i;
  double f;
};
typedef void (*Launcher)(const ArgVal* args);

// One entry of the generated launcher table lum_emu_kernels.
struct KernelEntry {
  const char* name;
  int nparams;
  const char* const* params;
  Launcher launch;
  // The bounds of its shared section (lum_emu_shared_<i>) in the TLS
  // initialization image; null when it declares no shared variable.
  const char* shared_lo;
  const char* shared_hi;
};

// The fiber stack size. 64 KiB covers the register tiles and call depth of
// generated kernels; one PROT_NONE page below each stack turns an overflow
// into a reported fault rather than silent corruption.
#ifndef LUM_EMU_STACK_SIZE
#define LUM_EMU_STACK_SIZE (64 * 1024)
#endif

struct Worker {
  Fiber* fibers = nullptr;  // capacity cap, grown on demand, reused across blocks and launches
  CpCopy* copies = nullptr;  // kCpAsyncMax per fiber
  int cap = 0;
  int n = 0;  // threads of the current block
  int live = 0;
  Fiber* cur = nullptr;  // the fiber running now; nullptr in the scheduler
  void* sched_sp = nullptr;
  Launcher entry = nullptr;
  const ArgVal* args = nullptr;
  bool shuffle = false;  // of the current block
  Landing land = Landing::AtWait;  // of the current block's cp.async copies
  uint64_t rng = 0;       // the thread order's
  uint64_t land_rng = 0;  // the landing moments' (Landing::Between)
  int pending = 0;        // cp.async copies of the block not landed yet
  // The current kernel's shared sections in this worker's TLS: [lo, hi)
  // each, poisoned at every block start.
  struct Span { char* lo; char* hi; } shared[2];
  int nshared = 0;
  int* order = nullptr;  // this pass's fiber order
  int pos = 0;            // index into order of the fiber running now
  uint32_t fp_mxcsr = 0;
  uint64_t fp_ctl = 0;
  // Stack regions for the signal handler: [lo, hi) of each mapping.
  struct Region { char* lo; char* hi; } regions[64];
  int nregions = 0;
};

inline bool in_fiber() { return tl_worker && tl_worker->cur; }

inline size_t page_size() {
  static size_t p = size_t(sysconf(_SC_PAGESIZE));
  return p;
}

// grow makes room for n fibers. Stacks are mapped once and kept; capacity
// at least doubles, so that a worker holds few mappings.
inline void grow(Worker& w, int n) {
  if (n <= w.cap) return;
  if (n < 2 * w.cap) n = 2 * w.cap;
  size_t pg = page_size(), per = LUM_EMU_STACK_SIZE + pg;
  int add = n - w.cap;
  char* base = (char*)mmap(nullptr, per * size_t(add), PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) fail("emulator", "cannot map %d fiber stacks", add);
  if (w.nregions < 64) w.regions[w.nregions++] = {base, base + per * size_t(add)};
  Fiber* nf = (Fiber*)realloc((void*)w.fibers, sizeof(Fiber) * size_t(n));
  int* no = (int*)realloc(w.order, sizeof(int) * size_t(n));
  CpCopy* nc = (CpCopy*)realloc((void*)w.copies, sizeof(CpCopy) * size_t(kCpAsyncMax) * size_t(n));
  if (!nf || !no || !nc) fail("emulator", "out of memory for %d fibers", n);
  w.fibers = nf;
  w.order = no;
  w.copies = nc;
  for (int i = 0; i < w.cap; i++) w.fibers[i].cp = nc + size_t(i) * kCpAsyncMax;
  for (int i = 0; i < add; i++) {
    char* lo = base + per * size_t(i);
    // The guard page is best effort: past vm.max_map_count mprotect fails and
    // the stack simply has none.
    (void)mprotect(lo, pg, PROT_NONE);
    Fiber& f = w.fibers[w.cap + i];
    memset(&f, 0, sizeof f);
    f.stack_top = lo + per;
    f.cp = nc + size_t(w.cap + i) * kCpAsyncMax;
  }
  w.cap = n;
}

#if defined(__x86_64__)
inline void save_fp_state(Worker& w) {
  uint32_t m;
  uint16_t c;
  __asm__ volatile("stmxcsr %0" : "=m"(m));
  __asm__ volatile("fnstcw %0" : "=m"(c));
  w.fp_mxcsr = m;
  w.fp_ctl = c;
}
// The initial frame matches what lum_emu_switch pops: mxcsr and the x87
// control word, r15, r14, r13, r12, rbx (the fiber), rbp, and the return
// address lum_emu_fiber_start, which finds the fiber in rbx.
inline void init_frame(Worker& w, Fiber& f) {
  uint64_t* sp = (uint64_t*)(f.stack_top - 64);
  sp[0] = uint64_t(w.fp_mxcsr) | (w.fp_ctl << 32);
  sp[1] = sp[2] = sp[3] = sp[4] = 0;
  sp[5] = uint64_t(uintptr_t(&f));
  sp[6] = 0;
  sp[7] = uint64_t(uintptr_t(&lum_emu_fiber_start));
  f.sp = sp;
}
#elif defined(__aarch64__)
inline void save_fp_state(Worker& w) {
  uint64_t c;
  __asm__ volatile("mrs %0, fpcr" : "=r"(c));
  w.fp_ctl = c;
}
// The initial frame matches lum_emu_switch: x19..x28, x29, x30 (the return
// address lum_emu_fiber_start), d8..d15, fpcr; x19 holds the fiber.
inline void init_frame(Worker& w, Fiber& f) {
  uint64_t* sp = (uint64_t*)(f.stack_top - 176);
  memset(sp, 0, 176);
  sp[0] = uint64_t(uintptr_t(&f));
  sp[11] = uint64_t(uintptr_t(&lum_emu_fiber_start));
  sp[20] = w.fp_ctl;
  f.sp = sp;
}
#endif

inline uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// next switches from the stack saved into *save to the next runnable fiber
// of this pass (in w.order after w.pos), or back to the scheduler when the
// pass is over. Switching fiber to fiber halves the switches of a pass.
inline void next(Worker& w, void** save) {
  while (++w.pos < w.n) {
    Fiber& g = w.fibers[w.order[w.pos]];
    if (g.state == State::Runnable) {
      w.cur = &g;
      threadIdx = g.tid;
      lum_emu_switch(save, g.sp);
      return;
    }
  }
  w.cur = nullptr;
  lum_emu_switch(save, w.sched_sp);
}

// land performs copy i of fiber f.
inline void land(Worker& w, Fiber& f, int i) {
  CpCopy& c = f.cp[i];
  if (c.landed) return;
  memcpy(c.dst, c.src, 16);
  c.landed = true;
  w.pending--;
}

// land_some lands each of f's pending copies with probability 1/2: the
// seeded moments of Landing::Between at f's scheduling points.
inline void land_some(Worker& w, Fiber& f) {
  uint64_t bits = 0;
  for (int i = 0; i < f.ncp; i++) {
    if (i % 64 == 0) bits = splitmix(w.land_rng);
    if (!f.cp[i].landed && (bits >> (i % 64) & 1)) land(w, f, i);
  }
}

// yield suspends the running fiber f at a scheduling point.
inline void yield(Worker& w, Fiber& f) {
  if (w.land == Landing::Between && w.pending > 0 && f.ncp > 0) land_some(w, f);
  next(w, &f.sp);
}

// ---------------------------------------------------------------- reports

// ranges appends "0-31, 40, 64-95" for the linear thread ids i with pick(i).
template <typename Pick>
inline void ranges(char* buf, size_t n, int count, Pick pick) {
  size_t len = strlen(buf);
  bool first = true;
  for (int i = 0; i < count;) {
    if (!pick(i)) { i++; continue; }
    int j = i;
    while (j + 1 < count && pick(j + 1)) j++;
    if (len + 32 >= n) { snprintf(buf + len, n - len, ", ..."); return; }
    len += size_t(snprintf(buf + len, n - len, "%s%d", first ? "" : ", ", i));
    if (j > i) len += size_t(snprintf(buf + len, n - len, "-%d", j));
    first = false;
    i = j + 1;
  }
}

// describe_waits lists every live thread by what it waits for.
inline void describe_waits(Worker& w, char* buf, size_t n) {
  buf[0] = 0;
  int lines[64], nl = 0;  // the distinct __syncthreads lines waited at (first 64)
  for (int i = 0; i < w.n; i++) {
    Fiber& f = w.fibers[i];
    if (f.state != State::Barrier) continue;
    bool known = false;
    for (int k = 0; k < nl; k++) known |= lines[k] == f.site;
    if (!known && nl < 64) lines[nl++] = f.site;
  }
  for (int k = 0; k < nl; k++) {
    size_t len = strlen(buf);
    snprintf(buf + len, n - len, "%sthreads ", len ? "; " : "");
    int site = lines[k];
    ranges(buf, n, w.n, [&](int i) { return w.fibers[i].state == State::Barrier && w.fibers[i].site == site; });
    len = strlen(buf);
    snprintf(buf + len, n - len, " wait at __syncthreads (line %d)", site);
  }
  for (int op = 0; op < kWarpOps; op++) {
    auto pick = [&](int i) { return w.fibers[i].state == State::Warp && w.fibers[i].op == op; };
    bool any = false;
    for (int i = 0; i < w.n && !any; i++) any = pick(i);
    if (!any) continue;
    size_t len = strlen(buf);
    snprintf(buf + len, n - len, "%sthreads ", len ? "; " : "");
    ranges(buf, n, w.n, pick);
    len = strlen(buf);
    snprintf(buf + len, n - len, " wait in %s", kWarpOpName[op]);
  }
  if (w.live == w.n) return;
  size_t len = strlen(buf);
  snprintf(buf + len, n - len, "; threads ");
  auto exited = [&](int i) { return w.fibers[i].state == State::Exited; };
  ranges(buf, n, w.n, exited);
  len = strlen(buf);
  snprintf(buf + len, n - len, " have returned");
}

[[noreturn]] inline void deadlock(Worker& w, const char* what) {
  static thread_local char buf[12288];
  describe_waits(w, buf, sizeof buf);
  fail("deadlock", "deadlock: %s (thread ids are linear: x + y*blockDim.x + z*blockDim.x*blockDim.y): %s", what, buf);
}

// ---------------------------------------------------------------- warps

constexpr uint64_t kPoison32 = 0x7fa57fa5u;  // NaN as f32, f16 and bf16 (emu.NaNPattern)
constexpr uint64_t kPoison64 = 0x7fa57fa57fa57fa5ull;

// mma_half is element hi (0: the low 16 bits, 1: the high ones) of a register
// holding two f16 or bf16 values.
inline float mma_half(unsigned reg, int hi, bool bf16) {
  unsigned short h = (unsigned short)(hi ? reg >> 16 : reg & 0xffffu);
  return bf16 ? lum_bf16_to_f32(h) : lum_f16_to_f32(h);
}

// mma_warp performs mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32
// for the 32 lanes of the warp starting at fiber base: D = A x B + C with A
// 16x16, B 16x8, C and D 16x8 in f32. The fragment layouts are those of the PTX
// ISA, section 9.7.14.5.8 "Matrix Fragments for mma.m16n8k16 with floating
// point type" (figures for A, B and C/D of .f16/.bf16 with .f32 accumulators),
// with groupID = lane >> 2 and threadID_in_group = lane % 4:
//   A: a0..a7, two per 32-bit register, low half first; row groupID for a0, a1,
//      a4, a5 and groupID + 8 for a2, a3, a6, a7; column threadID_in_group * 2
//      + (i & 1), plus 8 for i >= 4.
//   B: b0..b3, two per register; row (k) threadID_in_group * 2 + (i & 1), plus
//      8 for i >= 2; column (n) groupID.
//   C, D: c0..c3; row groupID for c0, c1 and groupID + 8 for c2, c3; column
//      threadID_in_group * 2 + (i & 1).
// The products of two f16 or bf16 values are exact in f32; they are summed in
// f32 from C in order of k (the tensor core's order and internal rounding
// differ, which the tolerance of every comparison allows).
inline void mma_warp(Worker& w, int base, bool bf16) {
  float A[16][16], B[16][8], D[16][8];
  for (int lane = 0; lane < 32; lane++) {
    const MmaLane& m = *w.fibers[base + lane].mma;
    int g = lane >> 2, t = lane & 3;
    for (int i = 0; i < 8; i++) A[g + ((i & 2) ? 8 : 0)][t * 2 + (i & 1) + (i >= 4 ? 8 : 0)] = mma_half(m.a[i / 2], i & 1, bf16);
    for (int i = 0; i < 4; i++) B[t * 2 + (i & 1) + (i >= 2 ? 8 : 0)][g] = mma_half(m.b[i / 2], i & 1, bf16);
    for (int i = 0; i < 4; i++) D[g + (i >= 2 ? 8 : 0)][t * 2 + (i & 1)] = m.c[i];
  }
  for (int r = 0; r < 16; r++)
    for (int n = 0; n < 8; n++) {
      float acc = D[r][n];
      for (int k = 0; k < 16; k++) acc += A[r][k] * B[k][n];
      D[r][n] = acc;
    }
  for (int lane = 0; lane < 32; lane++) {
    const MmaLane& m = *w.fibers[base + lane].mma;
    int g = lane >> 2, t = lane & 3;
    for (int i = 0; i < 4; i++) m.c[i] = D[g + (i >= 2 ? 8 : 0)][t * 2 + (i & 1)];
  }
}

// complete_warp finishes the collectives of warp wi that every live lane
// named in their mask has reached. Lanes that wait with one mask form one
// collective; a lane named in that mask that waits in a different collective
// (another op, mask or width) is a diverged warp. It returns whether it
// released any fiber.
inline bool complete_warp(Worker& w, int wi) {
  int base = wi * 32, lanes = w.n - base < 32 ? w.n - base : 32;
  unsigned live = 0, waiting = 0, done = 0;
  for (int l = 0; l < lanes; l++) {
    State st = w.fibers[base + l].state;
    if (st != State::Exited) live |= 1u << l;
    if (st == State::Warp) waiting |= 1u << l;
  }
  bool released = false;
  for (int first = 0; first < lanes; first++) {
    if (!(waiting >> first & 1) || (done >> first & 1)) continue;
    Fiber& lead = w.fibers[base + first];
    unsigned group = 0;  // the lanes in this collective
    for (int l = 0; l < lanes; l++) {
      if (!(waiting >> l & 1) || !(lead.mask >> l & 1)) continue;
      Fiber& f = w.fibers[base + l];
      if (f.op != lead.op || f.mask != lead.mask || f.width != lead.width)
        fail("deadlock",
             "deadlock: warp %d diverged: thread %d is in %s (mask 0x%08x, width %d) but thread %d, which that mask "
             "names, is in %s (mask 0x%08x, width %d)",
             wi, base + first, kWarpOpName[lead.op], lead.mask, lead.width, base + l, kWarpOpName[f.op], f.mask,
             f.width);
      group |= 1u << l;
    }
    done |= group;
    if ((lead.mask & live & ~group) != 0) continue;  // someone named in the mask has not arrived yet
    if (lead.op == OpMmaF16 || lead.op == OpMmaBF16) {
      // mma.sync is warp-wide: every lane of a full warp takes part.
      if (lanes != 32 || group != 0xffffffffu) {
        static thread_local char who[512];
        who[0] = 0;
        ranges(who, sizeof who, 32, [&](int l) { return !(group >> l & 1); });
        fail("deadlock",
             "deadlock: warp %d diverged: %s needs all 32 lanes of the warp, but lanes %s (threads %d + lane) %s",
             wi, kWarpOpName[lead.op], who, base, lanes != 32 ? "are beyond the block" : "have returned");
      }
      mma_warp(w, base, lead.op == OpMmaBF16);
      for (int l = 0; l < 32; l++) w.fibers[base + l].state = State::Runnable;
      released = true;
      continue;
    }
    uint64_t ballot = 0;
    for (int l = 0; l < lanes; l++)
      if ((group >> l & 1) && w.fibers[base + l].value) ballot |= 1u << l;
    for (int l = 0; l < lanes; l++) {
      if (!(group >> l & 1)) continue;
      Fiber& f = w.fibers[base + l];
      int wd = f.width, src = l, seg = l & ~(wd - 1);
      switch (f.op) {
        case OpShflIdx: src = seg + (f.arg & (wd - 1)); break;
        case OpShflUp: src = (l - seg) >= f.arg ? l - f.arg : l; break;
        case OpShflDown: src = (l - seg) + f.arg < wd ? l + f.arg : l; break;
        case OpShflXor: src = l ^ f.arg; if (src < 0 || src >= seg + wd) src = l; break;
        default: break;
      }
      switch (f.op) {
        case OpBallot: f.result = ballot; break;
        case OpAny: f.result = ballot != 0; break;
        case OpAll: f.result = (ballot & group) == group; break;
        case OpSyncwarp: f.result = 0; break;
        default:
          // Reading a lane that takes no part (returned, not in the mask,
          // beyond the block) is undefined on the GPU: poison it.
          if (src == l) f.result = f.value;
          else if (src < lanes && (group >> src & 1)) f.result = w.fibers[base + src].value;
          else f.result = f.wide ? kPoison64 : kPoison32;
      }
    }
    for (int l = 0; l < lanes; l++)
      if (group >> l & 1) w.fibers[base + l].state = State::Runnable;
    released = true;
  }
  return released;
}

}  // namespace lum_emu

namespace lum_emu {

// ---------------------------------------------------------------- blocks

// complete_barrier releases __syncthreads when every live thread waits at the
// same one. Threads that returned no longer count. Live threads waiting at two
// different __syncthreads are a deadlock: the CUDA programming guide makes a
// barrier in code that not all threads reach undefined, so the emulator is
// stricter than hardware that happens to count arrivals.
inline bool complete_barrier(Worker& w) {
  int site = -1;
  for (int i = 0; i < w.n; i++) {
    Fiber& f = w.fibers[i];
    if (f.state == State::Exited) continue;
    if (f.state != State::Barrier) return false;
    if (site == -1) site = f.site;
    else if (f.site != site) deadlock(w, "__syncthreads reached at different lines by the live threads of a block");
  }
  if (site == -1) return false;
  for (int i = 0; i < w.n; i++)
    if (w.fibers[i].state == State::Barrier) w.fibers[i].state = State::Runnable;
  return true;
}

// poison fills [lo, hi) with the NaN pattern, each aligned 32-bit word
// holding kPoison32 (emu.NaNPattern).
inline void poison(char* lo, char* hi) {
  while (lo < hi && (uintptr_t(lo) & 3)) {
    *lo = char(kPoison32 >> (8 * (uintptr_t(lo) & 3)));
    lo++;
  }
  const uint32_t word = uint32_t(kPoison32);
  for (; lo + 4 <= hi; lo += 4) memcpy(lo, &word, 4);
  for (; lo < hi; lo++) *lo = char(kPoison32 >> (8 * (uintptr_t(lo) & 3)));
}

// run_block runs one block to completion on the calling worker thread, its
// threads in order or shuffled (w.shuffle) and its cp.async copies landing
// as w.land says.
inline void run_block(Worker& w, uint3 block, int linear_block, uint64_t seed) {
  int n = int(blockDim.x * blockDim.y * blockDim.z);
  grow(w, n);
  save_fp_state(w);
  blockIdx = block;
  w.n = n;
  w.live = n;
  w.rng = seed ^ (uint64_t(linear_block) * 0xd1b54a32d192ed03ull);
  w.land_rng = w.rng ^ 0x6c616e64696e6721ull;
  w.pending = 0;
  for (int s = 0; s < w.nshared; s++) poison(w.shared[s].lo, w.shared[s].hi);
  for (int i = 0; i < n; i++) {
    Fiber& f = w.fibers[i];
    f.linear = i;
    f.tid = uint3{unsigned(i) % blockDim.x, unsigned(i) / blockDim.x % blockDim.y,
                  unsigned(i) / (blockDim.x * blockDim.y)};
    f.state = State::Runnable;
    f.ncp = 0;
    f.cp_groups = 0;
    init_frame(w, f);
    w.order[i] = i;
  }
  while (w.live > 0) {
    if (w.shuffle) {
      for (int i = n - 1; i > 0; i--) {
        // A multiply-shift draw in [0, i] (Lemire): a 64-bit division per
        // thread per pass costs as much as the permutation's other work.
        int j = int((unsigned __int128)splitmix(w.rng) * unsigned(i + 1) >> 64);
        int t = w.order[i];
        w.order[i] = w.order[j];
        w.order[j] = t;
      }
    }
    w.pos = -1;
    next(w, &w.sched_sp);  // runs the pass; returns when every fiber waits or has returned
    if (w.live == 0) break;
    // Every fiber now waits or has returned. Complete what can complete.
    bool released = false;
    for (int wi = 0; wi * 32 < n; wi++) released |= complete_warp(w, wi);
    released |= complete_barrier(w);
    if (!released) deadlock(w, "no thread of the block can proceed");
  }
  w.cur = nullptr;
}

// ---------------------------------------------------------------- collectives

inline Fiber& current(const char* what) {
  Worker* w = tl_worker;
  if (!w || !w->cur) fail("emulator", "%s called outside a kernel thread", what);
  return *w->cur;
}

inline void syncthreads_at(int line) {
  Fiber& f = current("__syncthreads");
  f.site = line;
  f.state = State::Barrier;
  yield(*tl_worker, f);
}

inline uint64_t warp_collective(WarpOp op, unsigned mask, uint64_t v, bool wide, int arg, int width) {
  Fiber& f = current(kWarpOpName[op]);
  int lane = f.linear & 31;
  if (!(mask >> lane & 1))
    fail("usage", "%s with mask 0x%08x called by lane %d, which the mask does not name", kWarpOpName[op], mask, lane);
  if (width < 1 || width > 32 || (width & (width - 1)))
    fail("usage", "%s with width %d: the width must be a power of two from 1 to 32", kWarpOpName[op], width);
  f.op = op;
  f.mask = mask;
  f.value = v;
  f.wide = wide;
  f.arg = arg;
  f.width = width;
  f.state = State::Warp;
  yield(*tl_worker, f);
  return f.result;
}

// mma is one lane's part of a warp-wide lum_mma_m16n8k16_*: it waits until
// every lane of the warp has arrived; the last arrival's scheduler pass
// computes the product for all of them (complete_warp).
inline void mma(WarpOp op, float* c, const unsigned* a, const unsigned* b) {
  Fiber& f = current(kWarpOpName[op]);
  MmaLane lane{a, b, c};
  f.mma = &lane;
  f.op = op;
  f.mask = 0xffffffffu;
  f.value = 0;
  f.wide = false;
  f.arg = 0;
  f.width = 32;
  f.state = State::Warp;
  yield(*tl_worker, f);
  f.mma = nullptr;
}

template <typename T>
inline uint64_t to_bits(T v) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "warp shuffles take 32- or 64-bit values");
  uint64_t u = 0;
  memcpy(&u, &v, sizeof(T));
  return u;
}
template <typename T>
inline T from_bits(uint64_t u) {
  T v;
  memcpy(&v, &u, sizeof(T));
  return v;
}
template <typename T>
inline T shfl(WarpOp op, unsigned mask, T v, int arg, int width) {
  return from_bits<T>(warp_collective(op, mask, to_bits(v), sizeof(T) == 8, arg, width));
}

}  // namespace lum_emu

extern "C" __attribute__((used, visibility("hidden"))) void lum_emu_fiber_main(lum_emu::Fiber* f) {
  lum_emu::Worker& w = *lum_emu::tl_worker;
  w.entry(w.args);
  // Copies never waited for land when their thread returns, the latest
  // moment the emulation has for them.
  for (int i = 0; i < f->ncp; i++) lum_emu::land(w, *f, i);
  f->ncp = 0;
  f->state = lum_emu::State::Exited;
  w.live--;
  lum_emu::yield(w, *f);
  __builtin_trap();  // an exited fiber is never resumed
}

// ---------------------------------------------------------------- context switch

// lum_emu_switch(save, load) saves the callee-saved registers and the floating
// point control state on the current stack, stores the stack pointer in
// *save, loads `load` as the stack pointer and restores the same set from it.
// Reloading the control state is slow, so x86-64 skips it when it is equal.
#if defined(__x86_64__)
__asm__(R"(
	.text
	.p2align 4
	.globl lum_emu_switch
	.hidden lum_emu_switch
	.type lum_emu_switch,@function
lum_emu_switch:
	pushq %rbp
	pushq %rbx
	pushq %r12
	pushq %r13
	pushq %r14
	pushq %r15
	subq $8, %rsp
	movq $0, (%rsp)
	stmxcsr (%rsp)
	fnstcw 4(%rsp)
	movq %rsp, (%rdi)
	movq (%rsp), %rax
	movq %rsi, %rsp
	movq (%rsp), %rcx
	cmpq %rax, %rcx
	je 1f
	ldmxcsr (%rsp)
	fldcw 4(%rsp)
1:
	addq $8, %rsp
	popq %r15
	popq %r14
	popq %r13
	popq %r12
	popq %rbx
	popq %rbp
	ret
	.size lum_emu_switch, .-lum_emu_switch

	.p2align 4
	.globl lum_emu_fiber_start
	.hidden lum_emu_fiber_start
	.type lum_emu_fiber_start,@function
lum_emu_fiber_start:
	movq %rbx, %rdi
	call lum_emu_fiber_main
	ud2
	.size lum_emu_fiber_start, .-lum_emu_fiber_start
)");
#elif defined(__aarch64__)
__asm__(R"(
	.text
	.p2align 4
	.globl lum_emu_switch
	.hidden lum_emu_switch
	.type lum_emu_switch,%function
lum_emu_switch:
	sub sp, sp, #176
	stp x19, x20, [sp, #0]
	stp x21, x22, [sp, #16]
	stp x23, x24, [sp, #32]
	stp x25, x26, [sp, #48]
	stp x27, x28, [sp, #64]
	stp x29, x30, [sp, #80]
	stp d8, d9, [sp, #96]
	stp d10, d11, [sp, #112]
	stp d12, d13, [sp, #128]
	stp d14, d15, [sp, #144]
	mrs x9, fpcr
	str x9, [sp, #160]
	mov x9, sp
	str x9, [x0]
	mov sp, x1
	ldr x9, [sp, #160]
	msr fpcr, x9
	ldp x19, x20, [sp, #0]
	ldp x21, x22, [sp, #16]
	ldp x23, x24, [sp, #32]
	ldp x25, x26, [sp, #48]
	ldp x27, x28, [sp, #64]
	ldp x29, x30, [sp, #80]
	ldp d8, d9, [sp, #96]
	ldp d10, d11, [sp, #112]
	ldp d12, d13, [sp, #128]
	ldp d14, d15, [sp, #144]
	add sp, sp, #176
	ret
	.size lum_emu_switch, .-lum_emu_switch

	.p2align 4
	.globl lum_emu_fiber_start
	.hidden lum_emu_fiber_start
	.type lum_emu_fiber_start,%function
lum_emu_fiber_start:
	mov x0, x19
	bl lum_emu_fiber_main
	brk #0
	.size lum_emu_fiber_start, .-lum_emu_fiber_start
)");
#endif

// ---------------------------------------------------------------- CUDA intrinsics

#define __syncthreads() lum_emu::syncthreads_at(__LINE__)
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  lum_emu::warp_collective(lum_emu::OpSyncwarp, mask, 0, false, 0, 32);
}
template <typename T> inline T __shfl_sync(unsigned mask, T v, int src, int width = warpSize) {
  return lum_emu::shfl(lum_emu::OpShflIdx, mask, v, src, width);
}
template <typename T> inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
  return lum_emu::shfl(lum_emu::OpShflUp, mask, v, int(delta), width);
}
template <typename T> inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
  return lum_emu::shfl(lum_emu::OpShflDown, mask, v, int(delta), width);
}
template <typename T> inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = warpSize) {
  return lum_emu::shfl(lum_emu::OpShflXor, mask, v, lane_mask, width);
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  return unsigned(lum_emu::warp_collective(lum_emu::OpBallot, mask, pred != 0, false, 0, 32));
}
inline int __any_sync(unsigned mask, int pred) {
  return int(lum_emu::warp_collective(lum_emu::OpAny, mask, pred != 0, false, 0, 32));
}
inline int __all_sync(unsigned mask, int pred) {
  return int(lum_emu::warp_collective(lum_emu::OpAll, mask, pred != 0, false, 0, 32));
}
// __activemask: the lanes of the caller's warp that have not returned.
inline unsigned __activemask() {
  lum_emu::Fiber& f = lum_emu::current("__activemask");
  lum_emu::Worker& w = *lum_emu::tl_worker;
  int base = f.linear & ~31;
  unsigned m = 0;
  for (int l = 0; l < 32 && base + l < w.n; l++)
    if (w.fibers[base + l].state != lum_emu::State::Exited) m |= 1u << l;
  return m;
}
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

// Atomics: the fibers of a block never interleave inside one call, and blocks
// on different workers meet through real atomics.
inline int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
inline float atomicAdd(float* p, float v) {
  uint32_t old = __atomic_load_n((uint32_t*)p, __ATOMIC_SEQ_CST), nw;
  do nw = lum_emu_f32_bits(lum_emu_bits_f32(old) + v);
  while (!__atomic_compare_exchange_n((uint32_t*)p, &old, nw, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
  return lum_emu_bits_f32(old);
}
inline int atomicMax(int* p, int v) {
  int old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (old < v && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
  }
  return old;
}
inline int atomicMin(int* p, int v) {
  int old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (old > v && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
  }
  return old;
}
inline int atomicExch(int* p, int v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
inline int atomicCAS(int* p, int cmp, int v) {
  __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return cmp;
}
inline unsigned atomicCAS(unsigned* p, unsigned cmp, unsigned v) {
  __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return cmp;
}

// ---------------------------------------------------------------- vector access

namespace lum_emu {
[[noreturn]] inline void misaligned(const char* what, const void* p) {
  char where[256] = "";
  if (g_describe) g_describe(p, where, sizeof where);
  fail("misaligned", "misaligned access: %s at %p is not 16-byte aligned%s%s", what, p, where[0] ? ": " : "", where);
}
}  // namespace lum_emu

inline float4 lum_ld4(const float* p) {
  if (uintptr_t(p) & 15) lum_emu::misaligned("lum_ld4", p);
  float4 v;
  memcpy(&v, p, 16);
  return v;
}
inline void lum_st4(float* p, float4 v) {
  if (uintptr_t(p) & 15) lum_emu::misaligned("lum_st4", p);
  memcpy(p, &v, 16);
}
// lum_ld4_bf16 / lum_st4_bf16 (and _f16): four half values, 8 bytes,
// 8-byte aligned, widened on load and rounded on store.
namespace lum_emu {
[[noreturn]] inline void misaligned8(const char* what, const void* p) {
  char where[256] = "";
  if (g_describe) g_describe(p, where, sizeof where);
  fail("misaligned", "misaligned access: %s at %p is not 8-byte aligned%s%s", what, p, where[0] ? ": " : "", where);
}
}  // namespace lum_emu
inline float4 lum_ld4_bf16(const lum_bf16* p) {
  if (uintptr_t(p) & 7) lum_emu::misaligned8("lum_ld4_bf16", p);
  lum_bf16 h[4];
  memcpy(h, p, 8);
  return make_float4(lum_bf16_to_f32(h[0]), lum_bf16_to_f32(h[1]), lum_bf16_to_f32(h[2]), lum_bf16_to_f32(h[3]));
}
inline void lum_st4_bf16(lum_bf16* p, float4 v) {
  if (uintptr_t(p) & 7) lum_emu::misaligned8("lum_st4_bf16", p);
  const lum_bf16 h[4] = {lum_f32_to_bf16(v.x), lum_f32_to_bf16(v.y), lum_f32_to_bf16(v.z), lum_f32_to_bf16(v.w)};
  memcpy(p, h, 8);
}
inline float4 lum_ld4_f16(const lum_f16* p) {
  if (uintptr_t(p) & 7) lum_emu::misaligned8("lum_ld4_f16", p);
  lum_f16 h[4];
  memcpy(h, p, 8);
  return make_float4(lum_f16_to_f32(h[0]), lum_f16_to_f32(h[1]), lum_f16_to_f32(h[2]), lum_f16_to_f32(h[3]));
}
inline void lum_st4_f16(lum_f16* p, float4 v) {
  if (uintptr_t(p) & 7) lum_emu::misaligned8("lum_st4_f16", p);
  const lum_f16 h[4] = {lum_f32_to_f16(v.x), lum_f32_to_f16(v.y), lum_f32_to_f16(v.z), lum_f32_to_f16(v.w)};
  memcpy(p, h, 8);
}
// __ldcg, a load that bypasses L1 (data other blocks wrote in this
// launch, after a fence): the threads here share one coherent memory.
inline float __ldcg(const float* p) { return *p; }
inline unsigned __ldcg(const unsigned* p) { return *p; }
inline uint4 lum_ld16(const void* p) {
  if (uintptr_t(p) & 15) lum_emu::misaligned("lum_ld16", p);
  uint4 v;
  memcpy(&v, p, 16);
  return v;
}
inline uint2 lum_ld8(const void* p) {
  if (uintptr_t(p) & 7) lum_emu::misaligned8("lum_ld8", p);
  uint2 v;
  memcpy(&v, p, 8);
  return v;
}

// ---------------------------------------------------------------- tensor cores

// Two f32 values rounded (to nearest, ties to even) and packed into one
// register, lo in the low 16 bits: a fragment register of mma.sync.
inline unsigned lum_pack_f16x2(float lo, float hi) {
  return unsigned(lum_f32_to_f16(lo)) | (unsigned(lum_f32_to_f16(hi)) << 16);
}
inline unsigned lum_pack_bf16x2(float lo, float hi) {
  return unsigned(lum_f32_to_bf16(lo)) | (unsigned(lum_f32_to_bf16(hi)) << 16);
}

// The warp-wide tensor-core multiply-accumulate c += a x b of one 16x8x16 tile
// (mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32): every lane
// of the warp must call it, with its fragments laid out as lum_emu::mma_warp
// describes.
inline void lum_mma_m16n8k16_f16(float c[4], const unsigned a[4], const unsigned b[2]) {
  lum_emu::mma(lum_emu::OpMmaF16, c, a, b);
}
inline void lum_mma_m16n8k16_bf16(float c[4], const unsigned a[4], const unsigned b[2]) {
  lum_emu::mma(lum_emu::OpMmaBF16, c, a, b);
}

// cp.async (PTX ISA, "Data Movement and Conversion Instructions": cp.async,
// cp.async.commit_group, cp.async.wait_group / cp.async.wait_all): a thread's copies
// are batched into per-thread cp.async-groups by lum_cp_async_commit (a commit
// with no copy since the last makes an empty group, trivially complete);
// lum_cp_async_wait_group<N>() returns when at most the N most recent committed
// groups are pending, every older one complete; lum_cp_async_wait is
// cp.async.wait_all, a commit then wait_group 0. A copy not yet in a
// committed group is not waited for by wait_group. A copy's write is visible
// to its thread after the wait that completes it, to the other threads after
// a barrier that follows that wait. When the copy really lands between its
// issue and that wait is the block's Landing (Worker::land); one never waited
// for lands when its thread returns.

// lum_cp_async16 copies 16 bytes from global to shared memory asynchronously
// (cp.async.cg.shared.global ... 16). Both addresses must be 16-byte aligned.
// Two copies to the same destination in flight at once (issued and not
// waited for) have no order between them (PTX ISA: undefined within a group)
// and are reported.
inline void lum_cp_async16(void* dst, const void* src) {
  lum_emu::Fiber& f = lum_emu::current("lum_cp_async16");
  lum_emu::Worker& w = *lum_emu::tl_worker;
  if (uintptr_t(dst) & 15) lum_emu::misaligned("lum_cp_async16 destination", dst);
  if (uintptr_t(src) & 15) lum_emu::misaligned("lum_cp_async16 source", src);
  if (f.ncp == lum_emu::kCpAsyncMax)
    lum_emu::fail("usage", "more than %d lum_cp_async16 copies issued and not waited for: wait for older groups first",
                  lum_emu::kCpAsyncMax);
  for (int i = 0; i < f.ncp; i++)
    if (f.cp[i].dst == dst)
      lum_emu::fail("usage",
                    "lum_cp_async16 to shared address %p while an earlier copy to it (cp.async-group %u) is not waited "
                    "for: the two are unordered",
                    dst, f.cp[i].group);
  f.cp[f.ncp] = lum_emu::CpCopy{dst, src, f.cp_groups, false};
  f.ncp++;
  w.pending++;
  if (w.land == lum_emu::Landing::AtIssue ||
      (w.land == lum_emu::Landing::Between && (lum_emu::splitmix(w.land_rng) & 3) == 0))
    lum_emu::land(w, f, f.ncp - 1);
}

// lum_cp_async_commit is cp.async.commit_group: the calling thread's copies
// issued since its last commit form its next cp.async-group (a group with no
// copy is trivially complete).
inline void lum_cp_async_commit() { lum_emu::current("lum_cp_async_commit").cp_groups++; }

namespace lum_emu {
// cp_async_wait_group completes the calling thread's committed groups but
// the n most recent.
inline void cp_async_wait_group(int n) {
  Fiber& f = current("lum_cp_async_wait_group");
  Worker& w = *tl_worker;
  int kept = 0;
  for (int i = 0; i < f.ncp; i++) {
    if (uint64_t(f.cp[i].group) + uint64_t(n) < uint64_t(f.cp_groups)) {
      land(w, f, i);
      continue;
    }
    f.cp[kept++] = f.cp[i];
  }
  f.ncp = kept;
}
}  // namespace lum_emu

// lum_cp_async_wait_group<N> is cp.async.wait_group N (N an immediate, as in
// PTX): the calling thread's committed groups but the N most recent complete.
template <int N>
inline void lum_cp_async_wait_group() {
  static_assert(N >= 0, "cp.async.wait_group takes a count of pending groups >= 0");
  lum_emu::cp_async_wait_group(N);
}

// lum_cp_async_wait waits for all of the calling thread's copies
// (cp.async.wait_all: a commit, then wait_group 0).
inline void lum_cp_async_wait() {
  lum_cp_async_commit();
  lum_emu::cp_async_wait_group(0);
}

// ---------------------------------------------------------------- ldmatrix

// lum_ldmatrix_x4 and lum_ldmatrix_x4_trans are
// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 (PTX ISA 9.7.14.5.15,
// "Warp-level matrix load instruction: ldmatrix"), warp-wide: four 8x8
// matrices of 16-bit values; lane l gives the address of row l % 8 of matrix
// l / 8 (8 values, 16 bytes, 16-byte aligned). With g = l / 4 and t = l % 4,
// register i of lane l receives matrix i's elements (g, 2t) and (g, 2t + 1),
// or with .trans (2t, g) and (2t + 1, g), the first in the low 16 bits. The
// rows really come from the lanes that name them: each lane fetches the row
// addresses it needs with warp shuffles (so every lane must call it, and a
// lane's wrong address shows in the other lanes' registers) and reads them
// after the shuffle. On the GPU the whole warp reads at once; here a lane
// reads when it resumes, so a write to the tile by a lane of the same warp
// after its ldmatrix and before a barrier (a race the hardware would not
// show) may be seen: the emulation is stricter, never easier.
inline unsigned lum_emu_ldmatrix_half(const void* row, int i) {
  unsigned short h;
  memcpy(&h, static_cast<const char*>(row) + 2 * i, 2);
  return h;
}
inline void lum_ldmatrix_x4(unsigned r[4], const void* row) {
  if (uintptr_t(row) & 15) lum_emu::misaligned("lum_ldmatrix_x4 row", row);
  int lane = lum_emu::current("lum_ldmatrix_x4").linear & 31, g = lane >> 2, t = lane & 3;
  for (int i = 0; i < 4; i++) {
    const void* p = __shfl_sync(0xffffffffu, row, i * 8 + g);
    r[i] = lum_emu_ldmatrix_half(p, 2 * t) | (lum_emu_ldmatrix_half(p, 2 * t + 1) << 16);
  }
}
inline void lum_ldmatrix_x4_trans(unsigned r[4], const void* row) {
  if (uintptr_t(row) & 15) lum_emu::misaligned("lum_ldmatrix_x4_trans row", row);
  int lane = lum_emu::current("lum_ldmatrix_x4_trans").linear & 31, g = lane >> 2, t = lane & 3;
  for (int i = 0; i < 4; i++) {
    const void* p0 = __shfl_sync(0xffffffffu, row, i * 8 + 2 * t);
    const void* p1 = __shfl_sync(0xffffffffu, row, i * 8 + 2 * t + 1);
    r[i] = lum_emu_ldmatrix_half(p0, g) | (lum_emu_ldmatrix_half(p1, g) << 16);
  }
}
