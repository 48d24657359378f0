// golden kernel mm_rms_prologue
extern "C" __global__ void mm_rms_prologue(const float* __restrict__ in0, const float* __restrict__ in1, const float* __restrict__ in2, float* __restrict__ out0) {
  __shared__ float As[16][68];
  __shared__ float Bs[16][68];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const long long m0 = (long long)blockIdx.y * 64, n0 = (long long)blockIdx.x * 64;
  long long bz = blockIdx.z;
  __shared__ float Red[1][64];
  for (int mm = threadIdx.x / 32; mm < 64; mm += 8) {
    long long row = (long long)blockIdx.z * 70LL + m0 + mm;
    float acc = 0.0f;
    if (m0 + mm < 70LL) for (long long k = threadIdx.x % 32; k < 96LL; k += 32) {
      long long i = row * 96LL + k;
      long long i1 = (((i) / 96LL) % 70LL);
      long long i2 = ((i) % 96LL);
      float v0 = in0[i1 * 96LL + i2];
      float v1 = v0 * v0;
      acc = acc + v1;
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (threadIdx.x % 32 == 0) Red[0][mm] = acc;
  }
  __syncthreads();
  float acc[4][4];
  for (int i = 0; i < 4; i++) for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
  for (long long k0 = 0; k0 < 96LL; k0 += 16) {
    for (int t = threadIdx.x; t < 1024; t += 256) {
      int kk = t % 16, mm = t / 16;
      As[kk][mm] = (m0 + mm < 70LL && k0 + kk < 96LL) ? ((((in0[((((m0 + mm) * 96LL + (k0 + kk)) / 96LL) % 70LL) * 96LL + (((m0 + mm) * 96LL + (k0 + kk)) % 96LL)]) * ((rsqrtf(((Red[0][(((((m0 + mm) * 96LL + (k0 + kk)) / 96LL) % 70LL)) - ((long long)blockIdx.z * 70LL + m0)] * (((0.03125f)))) + (((0.0009765625f)))))))) * (((in1[(((m0 + mm) * 96LL + (k0 + kk)) % 96LL)]))))) : 0.0f;
    }
    for (int t = threadIdx.x; t < 1024; t += 256) {
      int nn = t % 64, kk = t / 64;
      Bs[kk][nn] = (k0 + kk < 96LL && n0 + nn < 40LL) ? (in2[(k0 + kk) * 40LL + (n0 + nn)]) : 0.0f;
    }
    __syncthreads();
    for (int kk = 0; kk < 16; kk++) {
      float av[4], bv[4];
      for (int i = 0; i < 4; i++) { av[i] = As[kk][ty * 4 + i]; bv[i] = Bs[kk][tx * 4 + i]; }
      for (int i = 0; i < 4; i++) for (int j = 0; j < 4; j++) acc[i][j] += av[i] * bv[j];
    }
    __syncthreads();
  }
  for (int ii = 0; ii < 4; ii++) for (int jj = 0; jj < 4; jj++) {
    long long m = m0 + ty * 4 + ii, n = n0 + tx * 4 + jj;
    if (m >= 70LL || n >= 40LL) continue;
    out0[m * 40LL + n] = acc[ii][jj];
  }
}
