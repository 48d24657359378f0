// Test kernels for the counting runner (Count): known traffic through a
// model of L2. Written as the printer writes kernels (no #include, no asm).

// copy_scalar copies n floats, one a thread.
extern "C" __global__ void copy_scalar(const float* __restrict__ x, float* __restrict__ y, int n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < unsigned(n)) y[i] = x[i];
}

// copy_vec copies n floats (n % 4 == 0), 16 bytes a thread.
extern "C" __global__ void copy_vec(const float* __restrict__ x, float* __restrict__ y, int n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (4 * i < unsigned(n)) lum_st4(y + 4 * i, lum_ld4(x + 4 * i));
}

// dot_twice is a matrix-vector product that reads its weight w (rows x n)
// passes times: block r sums row r's products in a pass and again in the
// next, after a barrier, y[r] the sum of all (a planted regression: a
// second pass hits L2 only when L2 holds the row and x).
extern "C" __global__ void dot_twice(const float* __restrict__ w, const float* __restrict__ x, float* __restrict__ y,
                                     int n, int passes) {
  __shared__ float part[128];
  const float* row = w + (size_t)blockIdx.x * n;
  float s = 0;
  for (int p = 0; p < passes; p++) {
    for (int j = threadIdx.x; j < n; j += blockDim.x) s += row[j] * x[j];
    __syncthreads();
  }
  part[threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0;
    for (unsigned k = 0; k < blockDim.x; k++) t += part[k];
    y[blockIdx.x] = t;
  }
}

// sum_atomic adds x's n floats into *y with one atomicAdd a thread.
extern "C" __global__ void sum_atomic(const float* __restrict__ x, float* __restrict__ y, int n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < unsigned(n)) atomicAdd(y, x[i]);
}

// stage_async copies 16 bytes a thread into shared memory by cp.async and
// writes them back out reversed within the block.
extern "C" __global__ void stage_async(const float* __restrict__ x, float* __restrict__ y) {
  __shared__ __align__(16) float s[64][4];
  const unsigned t = threadIdx.x, T = blockDim.x, base = blockIdx.x * T;
  lum_cp_async16(s[t], x + 4 * (base + t));
  lum_cp_async_commit();
  lum_cp_async_wait();
  __syncthreads();
  lum_st4(y + 4 * (base + t), lum_ld4(s[T - 1 - t]));
}
