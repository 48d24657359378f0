// Package nvrtc compiles CUDA C source to PTX and CUBIN with NVIDIA's
// runtime compiler, NVRTC, loaded at run time.
//
// There is no cgo and no CUDA header at build time: [Load] opens libnvrtc with
// dlopen through github.com/ebitengine/purego, so the same binary builds
// everywhere and says plainly when NVRTC is missing. Any NVRTC from CUDA 11.2
// on is accepted; [Load] tries, in order:
//
//   - the path in $LUMSEARCH_NVRTC, when set (and nothing else: a library
//     named explicitly that fails to load is an error, not a cue to fall back);
//   - the sonames libnvrtc.so.13, libnvrtc.so.12, libnvrtc.so.11.2 (every 11.x
//     from 11.2 on) and libnvrtc.so, through the dynamic linker's search path;
//   - the same names under $CUDA_HOME/lib64, /usr/local/cuda/lib64 and
//     /usr/local/cuda-*/lib64, newest first.
//
// On Debian 12, NVRTC is the non-free packages libnvrtc11.2 and
// libnvrtc-builtins11.8 (NVRTC 11.8 behind the 11.2 soname).
//
// # Options
//
// [Library.Compile] always passes
//
//	--gpu-architecture=<Options.Arch>   sm_XX makes a CUBIN as well as PTX
//	--ptxas-options=-v                  resource usage in the log (sm_XX only)
//	-default-device                     unannotated functions are __device__
//	--std=c++17                         every supported NVRTC (11.2 on) has it
//
// followed by Options.Extra. An Extra option that sets the language standard
// (-std=... or --std=...) replaces --std=c++17. The resource usage that ptxas
// prints for each entry function (registers, static shared memory, constant
// memory, spills, stack) is parsed into [Result.Kernels]; [ParseResources]
// parses such a log on its own.
//
// # Concurrency and cancellation
//
// A [Library] is safe for concurrent use: NVRTC programs are independent, and
// each Compile creates and destroys its own. NVRTC cannot be interrupted, so
// Compile runs it on a goroutine and returns ctx.Err() as soon as the context
// ends; the abandoned compilation keeps running in the background until NVRTC
// returns, and then frees its program.
package nvrtc
