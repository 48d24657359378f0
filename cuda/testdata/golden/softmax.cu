__device__ __forceinline__ float lum_max_nan(float a, float b) {
  return (a != a || a > b) ? a : b;
}
__device__ __forceinline__ float lum_block_max(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = lum_max_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  int warps = (blockDim.x + 31) >> 5;
  v = lane < warps ? scratch[lane] : -INFINITY;
  for (int o = 16; o > 0; o >>= 1) v = lum_max_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float lum_block_sum(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  int warps = (blockDim.x + 31) >> 5;
  v = lane < warps ? scratch[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// golden kernel softmax
extern "C" __global__ void softmax(const float* __restrict__ in0, float* __restrict__ out0) {
  __shared__ float lum_scratch[32];
  for (long long r = blockIdx.x; r < 6LL; r += gridDim.x) {
    float acc0 = -INFINITY;
    for (long long j = threadIdx.x; j < 37LL; j += blockDim.x) {
        long long i = r * 37LL + j;
        long long i0 = ((i) / 111LL);
        long long i1 = (((i) / 37LL) % 3LL);
        long long i2 = ((i) % 37LL);
        float v0 = in0[i0 * 111LL + i1 * 37LL + i2];
        acc0 = lum_max_nan(acc0, v0);
    }
    float red0 = lum_block_max(acc0, lum_scratch);
    float acc1 = 0.0f;
    for (long long j = threadIdx.x; j < 37LL; j += blockDim.x) {
        long long i = r * 37LL + j;
        long long i0 = ((i) / 111LL);
        long long i1 = (((i) / 37LL) % 3LL);
        long long i2 = ((i) % 37LL);
        float v0 = in0[i0 * 111LL + i1 * 37LL + i2];
        float v1 = red0;
        float v2 = v0 - v1;
        float v3 = expf(v2);
        acc1 = acc1 + v3;
    }
    float red1 = lum_block_sum(acc1, lum_scratch);
    for (long long j = threadIdx.x; j < 37LL; j += blockDim.x) {
        long long i = r * 37LL + j;
        long long i0 = ((i) / 111LL);
        long long i1 = (((i) / 37LL) % 3LL);
        long long i2 = ((i) % 37LL);
        float v0 = in0[((i) / 111LL) * 111LL + (((i) / 37LL) % 3LL) * 37LL + ((i) % 37LL)];
        float v1 = red0;
        float v2 = v0 - v1;
        float v3 = expf(v2);
        float v4 = red1;
        float v5 = v3 / v4;
        out0[i] = v5;
    }
    __syncthreads();
  }
}
