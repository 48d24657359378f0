// Test kernels for the tensor-core helpers of emu.h: mma.sync m16n8k16,
// fragment packing and cp.async. Written as the printer writes kernels: no
// #include, no asm.

// mma: every warp multiplies its own tile. Thread i passes registers
// a[4i..4i+3], b[2i..2i+1] and accumulators c[4i..4i+3]; d gets them back.
extern "C" __global__ void mma(const unsigned* __restrict__ a, const unsigned* __restrict__ b,
                               const float* __restrict__ c, float* __restrict__ d, int bf16) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  unsigned ar[4] = {a[4 * i], a[4 * i + 1], a[4 * i + 2], a[4 * i + 3]};
  unsigned br[2] = {b[2 * i], b[2 * i + 1]};
  float acc[4] = {c[4 * i], c[4 * i + 1], c[4 * i + 2], c[4 * i + 3]};
  if (bf16) lum_mma_m16n8k16_bf16(acc, ar, br);
  else lum_mma_m16n8k16_f16(acc, ar, br);
  for (int q = 0; q < 4; q++) d[4 * i + q] = acc[q];
}

// pack: y[i] packs x[2i] (low half) and x[2i+1] (high half).
extern "C" __global__ void pack(const float* __restrict__ x, unsigned* __restrict__ y, int n, int bf16) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= unsigned(n)) return;
  y[i] = bf16 ? lum_pack_bf16x2(x[2 * i], x[2 * i + 1]) : lum_pack_f16x2(x[2 * i], x[2 * i + 1]);
}

// mma_returned: lane 5 of the warp returns before the mma.
extern "C" __global__ void mma_returned(float* __restrict__ d) {
  if (threadIdx.x == 5) return;
  unsigned a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
  float acc[4] = {0, 0, 0, 0};
  lum_mma_m16n8k16_f16(acc, a, b);
  d[threadIdx.x] = acc[0];
}

// mma_mixed: half the warp multiplies f16, the other half bf16.
extern "C" __global__ void mma_mixed(float* __restrict__ d) {
  unsigned a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
  float acc[4] = {0, 0, 0, 0};
  if (threadIdx.x < 16) lum_mma_m16n8k16_f16(acc, a, b);
  else lum_mma_m16n8k16_bf16(acc, a, b);
  d[threadIdx.x] = acc[0];
}

// cp_async: each thread copies 16 bytes of src into shared memory, reads its
// slot before waiting (early[i]), waits, and after the barrier reads its
// neighbour's copy (late[i]).
extern "C" __global__ void cp_async(const float* __restrict__ src, float* __restrict__ early,
                                    float* __restrict__ late) {
  __shared__ __align__(16) float s[64][4];
  unsigned i = threadIdx.x;
  for (int q = 0; q < 4; q++) s[i][q] = -1.0f;
  lum_cp_async16(&s[i][0], src + 4 * i);
  for (int q = 0; q < 4; q++) early[4 * i + q] = s[i][q];
  lum_cp_async_wait();
  __syncthreads();
  unsigned j = (i + 1) % blockDim.x;
  for (int q = 0; q < 4; q++) late[4 * i + q] = s[j][q];
}

// cp_async_misaligned copies from 4 bytes past a 16-byte boundary.
extern "C" __global__ void cp_async_misaligned(const float* __restrict__ src, float* __restrict__ out) {
  __shared__ __align__(16) float s[4];
  lum_cp_async16(s, src + 1);
  lum_cp_async_wait();
  out[0] = s[0];
}
