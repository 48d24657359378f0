// Package emu runs generated CUDA C on the CPU: g++ compiles the kernel text,
// unchanged, against an emulation header (emu.h), and a small runner process
// feeds it buffers, performs the launches and hands every buffer back. It is
// the second of the three oracles of DESIGN.md ("Numbers and correctness"):
// cheaper than a GPU, more real than the reference interpreter, and never
// easier than the hardware.
//
// # The kernel text
//
// The generated text includes no header and holds no asm. Kernels are
// `extern "C" __global__ void NAME(...)`, helpers `__device__
// __forceinline__`. emu.h defines, in plain C++17: the keywords as macros
// (__shared__ is `static thread_local`, see Memory); uint3, dim3, float4 (16-byte aligned)
// and friends; threadIdx, blockIdx, blockDim, gridDim and warpSize;
// __syncthreads; __shfl_sync, __shfl_up_sync, __shfl_down_sync,
// __shfl_xor_sync (any 32- or 64-bit type, with width), __ballot_sync,
// __any_sync, __all_sync, __syncwarp, __activemask; the float math functions
// including rsqrtf and the fast intrinsics (__expf is expf); a few atomics and __ldcg;
// lum_ld4 and lum_st4, the 16-byte vector load and store, which abort on a
// misaligned address; and lum_f16 and lum_bf16 (unsigned short, as in the
// NVRTC prelude) with lum_f16_to_f32, lum_f32_to_f16, lum_bf16_to_f32 and
// lum_f32_to_bf16 (round to nearest even; NaN becomes the canonical 0x7fff
// as on the GPU); the tensor-core helpers lum_mma_m16n8k16_f16 and _bf16
// (a warp collective over the PTX ISA's m16n8k16 fragment layouts, inputs
// at their half precision, products summed in f32), lum_pack_f16x2 and
// lum_pack_bf16x2, and cp.async: lum_cp_async16, lum_cp_async_commit
// (cp.async.commit_group), lum_cp_async_wait_group<N>
// (cp.async.wait_group N) and lum_cp_async_wait (cp.async.wait_all), with
// the PTX ISA's per-thread groups: wait_group N returns when at most the N
// most recent committed groups are pending, a copy not yet committed is not
// waited for, and two copies to one destination in flight at once are
// reported (they are unordered). When a copy lands between its issue and
// the wait that completes its group is Options.Landing: at the wait (a read
// the wait does not cover sees stale data), at once (a refill of a buffer
// other threads still read overwrites it), or at a seeded scheduling point
// between. The NVRTC prelude (package cuda) must declare the same names
// with the same meaning.
//
// # Threads
//
// Blocks of a grid run on Options.Workers OS threads, one block at a time per
// worker. Launch.Blocks, when set, runs only the listed blocks (linear ids,
// x fastest) of the real grid, for checking a sample of a large launch:
// blockIdx and gridDim are those of the whole grid and every check below
// applies to the blocks that run. The threads of a block are user-level fibers on their worker: 64 KiB
// stacks with a guard page, mapped once per worker and reused, and a
// hand-written context switch (x86-64 and aarch64: callee-saved registers and
// the floating-point control state). A fiber runs until a scheduling point
// (__syncthreads, a warp collective, return). The scheduler runs every
// runnable fiber once per pass, in thread order or, with Options.Shuffle, in
// an order freshly permuted (from Options.Seed and the block id) at every
// pass, so that a missing barrier changes the result. With Options.Vary
// each block takes its own thread order and landing instead, the six
// combinations in turn from a seeded start (Launch.Seed names a launch's
// draws), so that one run of a sample of blocks tries them all.
//
// __syncthreads completes when every live thread of the block waits at the
// same __syncthreads (the same source line): threads that have returned no
// longer count. Live threads waiting at different __syncthreads, or a warp
// collective that waits for a thread held at a barrier, is a deadlock and is
// reported with the block id and the ids of the threads and what each waits
// for; the runner never hangs on it.
//
// Warp collectives go through the per-warp exchange recorded in each fiber:
// the call is an implicit rendezvous of the live lanes named in its mask, all
// of which must call the same collective with the same mask and width (a
// mismatch is reported as a diverged warp). When the last of them arrives,
// every lane's result is computed at once from the values all of them
// supplied, with the CUDA rules for width segments (a source lane outside the
// caller's segment returns the caller's own value). Reading a lane that takes
// no part (returned, absent from the mask, or beyond the block's last
// thread) is undefined on the GPU; here it returns a NaN pattern
// (NaNPattern, 0x7fa57fa5) so that a result built on it is visibly wrong.
//
// # Memory
//
// Every buffer has its own mapping with a PROT_NONE page on each side; its
// data ends flush against the upper guard (rounded down to 16 bytes, so that
// vector access keeps cudaMalloc's alignment), and the few bytes around the
// data hold a canary checked after every launch. An access that reaches a
// guard page is caught by the runner's SIGSEGV handler and reported as an
// "out-of-bounds access" naming the kernel, the launch, the block, the thread
// and the buffer; a write into the canary bytes is reported after the
// launch. A buffer given without data starts filled with the NaN pattern
// (NaNPattern); Unwritten tells which of its elements a run wrote.
//
// Shared memory is poisoned with the NaN pattern at every block start, as
// the GPU leaves it holding garbage: a thread that reads a slot no thread of
// its block wrote reads a NaN, in the first block a worker runs as in the
// next. __shared__ variables live in TLS sections of their own
// ("lum_emu_shared_<i>" for kernel i, whose definition Run finds in the text
// and precedes with a redefinition of __shared__ and a #line directive;
// "lum_emu_shared" for the text before the first kernel), whose bounds the
// runner maps into each worker's TLS block. A block poisons the common
// section and its kernel's. (A __shared__ variable in a helper placed
// between two kernels falls in the earlier kernel's section and is poisoned
// only for it; generated text prints helpers first.)
//
// # Counting bytes
//
// Count runs launches through a runner built to count: the same kernel
// text and emu.h compiled with GCC's -fsanitize=thread instrumentation,
// whose calls before every memory access (and in place of every atomic)
// count.inc defines instead of libtsan. Accesses that fall in a buffer's
// data while a launch runs feed a model of the GPU's L2 (LRU over 128-byte
// lines, filled and written back by 32-byte sectors, cold at every launch),
// whose misses and write-backs are the launch's DRAM bytes. It runs one
// worker: blocks reach L2 in linear order, not in the GPU's concurrent
// waves, and the threads of a block between two scheduling points one
// after another, not a warp's lanes together, so a block's working set
// (not a warp's) must fit L2 for threads to share lines.
//
// # Compilation
//
// Run generates the glue (a launcher per Kernel and the table the runner
// reads), compiles kernels, emu.h, runner.inc and glue in one g++ run
// (`-std=c++17 -O1 -g0`) and caches the binary under Options.CacheDir, keyed
// by the SHA-256 of everything that goes into it, compiler identity included:
// pass all kernels of a program at once so that one compilation serves them.
//
// Figures: __syncthreads costs about 4 µs for 256 threads (2-core x86-64
// VM, BenchmarkSyncthreads256); compiling a runner takes about 0.7 s and
// dominates everything else.
package emu
