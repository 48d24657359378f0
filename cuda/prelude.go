package cuda

import "strings"

// NVRTCPrelude defines, for NVRTC, what generated kernels call beyond
// CUDA's built-ins: the half-precision storage types and their conversions
// (inline PTX, rounding to nearest even), 16-byte vector loads and stores,
// and INFINITY and NAN (which come from headers NVRTC compiles without).
// The emulation header (package cuda/emu) defines the same names in plain
// C++.
const NVRTCPrelude = `// lumsearch NVRTC prelude
typedef unsigned short lum_f16;
typedef unsigned short lum_bf16;
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif
__device__ __forceinline__ float lum_f16_to_f32(lum_f16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ lum_f16 lum_f32_to_f16(float f) {
  lum_f16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
__device__ __forceinline__ float lum_bf16_to_f32(lum_bf16 h) {
  return __int_as_float(((int)h) << 16);
}
__device__ __forceinline__ lum_bf16 lum_f32_to_bf16(float f) {
  lum_bf16 h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
__device__ __forceinline__ float4 lum_ld4(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}
__device__ __forceinline__ void lum_st4(float* p, float4 v) {
  *reinterpret_cast<float4*>(p) = v;
}
`

// Source joins printed kernels (each once) into one translation unit, the
// helpers they call first, without a prelude: NVRTC gets NVRTCPrelude in front of it, the emulation its
// header.
func Source(kernels []*Kernel) string {
	kernels = Distinct(kernels)
	var b strings.Builder
	printed := map[string]bool{}
	for _, k := range kernels {
		for _, h := range k.Helpers {
			if !printed[h] {
				printed[h] = true
				b.WriteString(blockReduceHelpers[h])
				b.WriteByte('\n')
			}
		}
	}
	for i, k := range kernels {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(k.Text)
	}
	return b.String()
}
