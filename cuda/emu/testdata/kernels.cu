// Test kernels for package emu, written the way lumsearch's CUDA printer
// writes kernels: no #include, no asm, extern "C" entry points.

__device__ __forceinline__ unsigned lum_gid() { return blockIdx.x * blockDim.x + threadIdx.x; }

// lum_scratch is shared memory declared in a helper, before any kernel.
__device__ __forceinline__ float* lum_scratch() {
  __shared__ float scratch[256];
  return scratch;
}

extern "C" __global__ void vadd(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                                int n) {
  unsigned i = lum_gid();
  if (i < unsigned(n)) c[i] = a[i] + b[i];
}

// vadd4 adds four floats per thread with 16-byte accesses and finishes the
// tail (n % 4) with scalar accesses.
extern "C" __global__ void vadd4(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                                 int n) {
  unsigned i = lum_gid();
  unsigned nv = unsigned(n) / 4;
  if (i < nv) {
    float4 x = lum_ld4(a + 4 * i), y = lum_ld4(b + 4 * i);
    lum_st4(c + 4 * i, make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w));
  } else if (i < nv + unsigned(n) % 4) {
    unsigned j = 4 * nv + (i - nv);
    c[j] = a[j] + b[j];
  }
}

// block_sum sums row blockIdx.x of x (n columns) with a shared-memory tree
// that works for any block size.
extern "C" __global__ void block_sum(const float* __restrict__ x, float* __restrict__ out, int n) {
  __shared__ float s[1024];
  unsigned t = threadIdx.x;
  float v = 0.0f;
  for (unsigned i = t; i < unsigned(n); i += blockDim.x) v += x[blockIdx.x * unsigned(n) + i];
  s[t] = v;
  __syncthreads();
  for (unsigned k = 1; k < blockDim.x; k <<= 1) {
    if (t % (2 * k) == 0 && t + k < blockDim.x) s[t] += s[t + k];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

__device__ __forceinline__ float lum_warp_sum(float v) {
  for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffff, v, m);
  return v;
}

// warp_sum sums row blockIdx.x with warp shuffles: each warp reduces with
// xor shuffles, the first warp reduces the warps' sums with down shuffles.
// The block size is a multiple of 32.
extern "C" __global__ void warp_sum(const float* __restrict__ x, float* __restrict__ out, int n) {
  __shared__ float w[32];
  unsigned t = threadIdx.x, lane = t % 32, warp = t / 32, nw = blockDim.x / 32;
  float v = 0.0f;
  for (unsigned i = t; i < unsigned(n); i += blockDim.x) v += x[blockIdx.x * unsigned(n) + i];
  v = lum_warp_sum(v);
  if (lane == 0) w[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < nw ? w[lane] : 0.0f;
    for (unsigned d = 16; d > 0; d >>= 1) v += __shfl_down_sync(0xffffffff, v, d);
    if (lane == 0) out[blockIdx.x] = v;
  }
}

extern "C" __global__ void f32_to_f16(const float* __restrict__ x, lum_f16* __restrict__ y, int n) {
  unsigned i = lum_gid();
  if (i < unsigned(n)) y[i] = lum_f32_to_f16(x[i]);
}
extern "C" __global__ void f16_to_f32(const lum_f16* __restrict__ x, float* __restrict__ y, int n) {
  unsigned i = lum_gid();
  if (i < unsigned(n)) y[i] = lum_f16_to_f32(x[i]);
}
extern "C" __global__ void f32_to_bf16(const float* __restrict__ x, lum_bf16* __restrict__ y, int n) {
  unsigned i = lum_gid();
  if (i < unsigned(n)) y[i] = lum_f32_to_bf16(x[i]);
}
extern "C" __global__ void bf16_to_f32(const lum_bf16* __restrict__ x, float* __restrict__ y, int n) {
  unsigned i = lum_gid();
  if (i < unsigned(n)) y[i] = lum_bf16_to_f32(x[i]);
}

// oob_write forgets the bounds check.
extern "C" __global__ void oob_write(float* __restrict__ y, int n) { y[lum_gid()] = float(n); }

// oob_read_before reads one element before the start.
extern "C" __global__ void oob_read_before(const float* __restrict__ x, float* __restrict__ y) {
  unsigned i = lum_gid();
  y[i] = x[int(i) - 1];
}

// tail_write writes only y[n], into the bytes between the data and the guard.
extern "C" __global__ void tail_write(float* __restrict__ y, int n) {
  if (lum_gid() == 0) y[n] = 1.0f;
}

// misaligned loads four floats from one float past a 16-byte boundary.
extern "C" __global__ void misaligned(const float* __restrict__ x, float* __restrict__ y) {
  float4 v = lum_ld4(x + 4 * lum_gid() + 1);
  y[lum_gid()] = v.x;
}

// divergent_barrier puts a barrier in a branch that only the first warp takes.
extern "C" __global__ void divergent_barrier(float* __restrict__ y) {
  if (threadIdx.x < 32) {
    y[threadIdx.x] = 1.0f;
    __syncthreads();
  }
  __syncthreads();
}

// barrier_vs_shuffle: thread 0 waits at a barrier for its warp, which waits
// in a shuffle for thread 0.
extern "C" __global__ void barrier_vs_shuffle(float* __restrict__ y) {
  float v = float(threadIdx.x);
  if (threadIdx.x == 0) __syncthreads();
  else v = __shfl_xor_sync(0xffffffff, v, 1);
  y[threadIdx.x] = v;
}

// early_return: threads at and past `active` return before the barrier.
extern "C" __global__ void early_return(const float* __restrict__ x, float* __restrict__ y, int active) {
  __shared__ float s[1024];
  unsigned t = threadIdx.x;
  if (t >= unsigned(active)) return;
  s[t] = x[blockIdx.x * blockDim.x + t] * 2.0f;
  __syncthreads();
  y[blockIdx.x * blockDim.x + t] = s[(t + 1) % unsigned(active)];
}

// shift_racy reads its left neighbour's shared slot without a barrier; in
// thread order the neighbour has always written it already.
extern "C" __global__ void shift_racy(const float* __restrict__ x, float* __restrict__ y) {
  __shared__ float s[1024];
  unsigned t = threadIdx.x, i = lum_gid();
  s[t] = x[i];
  y[i] = t > 0 ? s[t - 1] : 0.0f;
}

extern "C" __global__ void shift_fixed(const float* __restrict__ x, float* __restrict__ y) {
  __shared__ float s[1024];
  unsigned t = threadIdx.x, i = lum_gid();
  s[t] = x[i];
  __syncthreads();
  y[i] = t > 0 ? s[t - 1] : 0.0f;
}

extern "C" __global__ void spin(const int* __restrict__ flag) {
  while (*(const volatile int*)flag == 0) {
  }
}

// sync_loop is the __syncthreads benchmark.
extern "C" __global__ void sync_loop(float* __restrict__ y, int iters) {
  __shared__ float s[1024];
  unsigned t = threadIdx.x;
  s[t] = float(t);
  for (int k = 0; k < iters; k++) {
    __syncthreads();
    s[t] += 1.0f;
  }
  y[blockIdx.x * blockDim.x + t] = s[t];
}

// warp_ops records, per thread, the results of the warp collectives (see
// TestWarpCollectives for the expected values).
extern "C" __global__ void warp_ops(const int* __restrict__ x, int* __restrict__ out) {
  unsigned t = threadIdx.x, lane = t % 32;
  int v = x[t];
  int* o = out + 10 * t;
  o[0] = __shfl_xor_sync(0xffffffff, v, 5);
  o[1] = __shfl_down_sync(0xffffffff, v, 3);
  o[2] = __shfl_up_sync(0xffffffff, v, 3);
  o[3] = __shfl_sync(0xffffffff, v, 31 - int(lane));
  o[4] = __shfl_xor_sync(0xffffffff, v, 8, 8);
  o[5] = __shfl_down_sync(0xffffffff, v, 5, 16);
  o[6] = int(__ballot_sync(0xffffffff, v & 1));
  o[7] = __any_sync(0xffffffff, v > 1000);
  o[8] = __all_sync(0xffffffff, v > 0);
  o[9] = __float_as_int(__shfl_down_sync(0xffffffff, float(v), 1));
}

// shfl_exited: lanes 16-31 return; lanes 8-15 then read lanes 16-23.
extern "C" __global__ void shfl_exited(float* __restrict__ y) {
  unsigned lane = threadIdx.x % 32;
  if (lane >= 16) return;
  y[threadIdx.x] = __shfl_down_sync(0xffffffff, float(lane + 1), 8);
}

// index3d writes, for every thread, its block and thread index.
extern "C" __global__ void index3d(int* __restrict__ out) {
  unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  int* o = out + 6 * (b * blockDim.x * blockDim.y * blockDim.z + t);
  o[0] = int(blockIdx.x);
  o[1] = int(blockIdx.y);
  o[2] = int(blockIdx.z);
  o[3] = int(threadIdx.x);
  o[4] = int(threadIdx.y);
  o[5] = int(threadIdx.z);
}

// grid_ids writes, for every thread, its block index and the grid's
// dimensions.
extern "C" __global__ void grid_ids(int* __restrict__ out) {
  unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  int* o = out + 6 * (b * blockDim.x * blockDim.y * blockDim.z + t);
  o[0] = int(blockIdx.x);
  o[1] = int(blockIdx.y);
  o[2] = int(blockIdx.z);
  o[3] = int(gridDim.x);
  o[4] = int(gridDim.y);
  o[5] = int(gridDim.z);
}

extern "C" __global__ void scalars(double* __restrict__ y, long long a, float b, unsigned c) {
  y[0] = double(a);
  y[1] = double(b);
  y[2] = double(c);
}

// math_ops exercises the math functions on one input each.
extern "C" __global__ void math_ops(const float* __restrict__ x, float* __restrict__ y, int n) {
  unsigned i = lum_gid();
  if (i >= unsigned(n)) return;
  float v = x[i], a = fabsf(v);
  float* o = y + 12 * i;
  o[0] = expf(v);
  o[1] = logf(a);
  o[2] = sqrtf(a);
  o[3] = rsqrtf(a);
  o[4] = tanhf(v);
  o[5] = erff(v);
  o[6] = powf(a, 1.5f);
  o[7] = fmaxf(v, 0.25f);
  o[8] = fminf(v, 0.25f);
  o[9] = __expf(v);
  o[10] = v > 0 ? INFINITY : -INFINITY;
  o[11] = fabsf(v);
}

// stack_hog needs twice its fiber stack.
extern "C" __global__ void stack_hog(float* __restrict__ y, int n) {
  volatile float big[32768];
  for (int i = 0; i < n; i++) big[i] = float(i);
  y[threadIdx.x] = big[n - 1];
}

// half_masks: each half-warp shuffles among itself with its own mask.
extern "C" __global__ void half_masks(const int* __restrict__ x, int* __restrict__ y) {
  unsigned lane = threadIdx.x % 32;
  int v = x[threadIdx.x];
  if (lane < 16) y[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, v, 1);
  else y[threadIdx.x] = __shfl_xor_sync(0xffff0000u, v, 2);
}

// diverged_warp: the two halves of a warp call different shuffles with the
// full mask.
extern "C" __global__ void diverged_warp(int* __restrict__ y) {
  int v = int(threadIdx.x);
  if (threadIdx.x % 32 < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);
  else v = __shfl_down_sync(0xffffffffu, v, 1);
  y[threadIdx.x] = v;
}

// shared_unwritten: only block 0's threads write their shared slot; every
// block reads its own after the barrier, so the other blocks read a slot
// no thread of theirs wrote. helper says to use lum_scratch's memory.
extern "C" __global__ void shared_unwritten(float* __restrict__ y, int helper) {
  __shared__ float s[256];
  float* p = helper ? lum_scratch() : s;
  unsigned t = threadIdx.x;
  if (blockIdx.x == 0) p[t] = float(t);
  __syncthreads();
  y[lum_gid()] = p[t];
}
