package cuda

import "strings"

// NVRTCPrelude defines, for NVRTC, what generated kernels call beyond
// CUDA's built-ins: the half-precision storage types and their conversions
// (inline PTX, rounding to nearest even), 16-byte vector loads and stores,
// the tensor-core helpers (packing f16x2/bf16x2 fragment registers,
// mma.sync m16n8k16 with f32 accumulators, cp.async global-to-shared
// copies, ldmatrix fragment loads), the quantized weights' element decoders, and INFINITY and NAN (which come from headers NVRTC compiles without).
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
// x, opaque to the compiler: a value computed once outside a loop stays
// in its register instead of being recomputed in the loop (NVVM
// rematerializes cheap values under register pressure).
__device__ __forceinline__ float lum_keep(float x) {
  asm volatile("" : "+f"(x));
  return x;
}
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
__device__ __forceinline__ float4 lum_ld4(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}
__device__ __forceinline__ void lum_st4(float* p, float4 v) {
  *reinterpret_cast<float4*>(p) = v;
}
// Four f16 or bf16 values (8 bytes, 8-byte aligned) widened to f32, and
// four f32 values rounded (to nearest, ties to even) and stored as one
// 8-byte word: an elementwise kernel's vector path over half types.
__device__ __forceinline__ float4 lum_ld4_bf16(const lum_bf16* p) {
  const uint2 w = *reinterpret_cast<const uint2*>(p);
  return make_float4(__uint_as_float(w.x << 16), __uint_as_float(w.x & 0xffff0000u), __uint_as_float(w.y << 16), __uint_as_float(w.y & 0xffff0000u));
}
__device__ __forceinline__ void lum_st4_bf16(lum_bf16* p, float4 v) {
  uint2 w;
  w.x = (unsigned)lum_f32_to_bf16(v.x) | ((unsigned)lum_f32_to_bf16(v.y) << 16);
  w.y = (unsigned)lum_f32_to_bf16(v.z) | ((unsigned)lum_f32_to_bf16(v.w) << 16);
  *reinterpret_cast<uint2*>(p) = w;
}
__device__ __forceinline__ float4 lum_ld4_f16(const lum_f16* p) {
  const uint2 w = *reinterpret_cast<const uint2*>(p);
  return make_float4(lum_f16_to_f32((lum_f16)(w.x & 0xffffu)), lum_f16_to_f32((lum_f16)(w.x >> 16)), lum_f16_to_f32((lum_f16)(w.y & 0xffffu)), lum_f16_to_f32((lum_f16)(w.y >> 16)));
}
__device__ __forceinline__ void lum_st4_f16(lum_f16* p, float4 v) {
  uint2 w;
  w.x = (unsigned)lum_f32_to_f16(v.x) | ((unsigned)lum_f32_to_f16(v.y) << 16);
  w.y = (unsigned)lum_f32_to_f16(v.z) | ((unsigned)lum_f32_to_f16(v.w) << 16);
  *reinterpret_cast<uint2*>(p) = w;
}
// 16 bytes of global memory (16-byte aligned) as four 32-bit words: one
// vector load of a streamed weight row. Not through the read-only path:
// an in-place kernel may write the buffer it reads.
__device__ __forceinline__ uint4 lum_ld16(const void* p) {
  return *reinterpret_cast<const uint4*>(p);
}
// 8 bytes (8-byte aligned) as two 32-bit words: a few f16 scales.
__device__ __forceinline__ uint2 lum_ld8(const void* p) {
  return *reinterpret_cast<const uint2*>(p);
}
// Tensor cores (sm_80 and later). Fragment registers hold two f16 or bf16
// values, the lower-indexed one in the low 16 bits; cvt.rn.{f16x2,bf16x2}.f32
// d, a, b puts a in the upper half.
__device__ __forceinline__ unsigned lum_pack_f16x2(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ unsigned lum_pack_bf16x2(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
// c += a x b for one 16x8x16 tile, warp-wide; fragment layouts: PTX ISA
// 9.7.14.5.8, "Matrix Fragments for mma.m16n8k16 with floating point type".
__device__ __forceinline__ void lum_mma_m16n8k16_f16(float c[4], const unsigned a[4], const unsigned b[2]) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void lum_mma_m16n8k16_bf16(float c[4], const unsigned a[4], const unsigned b[2]) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// 16 bytes from global to shared memory, asynchronously (both 16-byte
// aligned); lum_cp_async_commit closes the thread's cp.async-group,
// lum_cp_async_wait_group<N> waits until at most the N most recent groups
// are pending, lum_cp_async_wait for all of the thread's copies.
__device__ __forceinline__ void lum_cp_async16(void* dst, const void* src) {
  unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(s), "l"(src) : "memory");
}
__device__ __forceinline__ void lum_cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int N> __device__ __forceinline__ void lum_cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
}
__device__ __forceinline__ void lum_cp_async_wait() {
  asm volatile("cp.async.wait_all;" ::: "memory");
}
// ldmatrix (sm_75 and later), warp-wide: four 8x8 matrices of 16-bit values
// from shared memory; lane l gives the address of row l % 8 of matrix l / 8
// (8 values, 16-byte aligned), and register i receives matrix i's elements
// (l / 4, 2 (l % 4)) and (l / 4, 2 (l % 4) + 1), low half first, or with
// .trans (2 (l % 4), l / 4) and (2 (l % 4) + 1, l / 4): PTX ISA 9.7.14.5.15,
// "Warp-level matrix load instruction: ldmatrix". A row-major tile read with
// .trans gives mma's B fragments of its transpose. The memory clobber keeps
// the compiler from moving the loads across barriers.
__device__ __forceinline__ void lum_ldmatrix_x4(unsigned r[4], const void* row) {
  unsigned s = (unsigned)__cvta_generic_to_shared(row);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s) : "memory");
}
__device__ __forceinline__ void lum_ldmatrix_x4_trans(unsigned r[4], const void* row) {
  unsigned s = (unsigned)__cvta_generic_to_shared(row);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s) : "memory");
}
`

// Source joins printed kernels (each once, with their row buckets'
// kernels) into one translation unit, the
// helpers they call first, without a prelude: NVRTC gets NVRTCPrelude in front of it, the emulation its
// header.
func Source(kernels []*Kernel) string {
	return source(WithBuckets(kernels))
}

// source is Source of exactly the kernels given (each once), for a
// translation unit that runs those alone (a verification).
func source(kernels []*Kernel) string {
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
