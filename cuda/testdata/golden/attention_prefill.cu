// golden kernel attention_prefill
extern "C" __global__ void attention_prefill(const float* __restrict__ in0, const float* __restrict__ in1, const float* __restrict__ in2, const float* __restrict__ in3, const float* __restrict__ in4, float* __restrict__ out0) {
  __shared__ float Qs[8];
  __shared__ float Ps[32];
  __shared__ float St[3];
  for (long long row = blockIdx.x; row < 20LL; row += gridDim.x) {
    long long s = row % 5LL, bz = row / 5LL;
    long long b1 = bz % 4LL; bz /= 4LL;
    long long b0 = bz % 1LL; bz /= 1LL;
    for (long long dd = threadIdx.x; dd < 8LL; dd += blockDim.x) {
      float v0 = in0[b1 * 40LL + s * 8LL + dd];
      float v1 = in3[((s * 8LL + dd) / 8LL) * 8LL + ((s * 8LL + dd) % 8LL)];
      float v2 = v1;
      float v3 = v2;
      float v4 = v3;
      float v5 = v0 * v4;
      float v6 = dd < 4LL ? (-((in0[b1 * 40LL + s * 8LL + (dd + 4LL)]))) : ((in0[b1 * 40LL + s * 8LL + (dd - 4LL)]));
      float v7 = in4[((s * 8LL + dd) / 8LL) * 8LL + ((s * 8LL + dd) % 8LL)];
      float v8 = v7;
      float v9 = v8;
      float v10 = v9;
      float v11 = v6 * v10;
      float v12 = v5 + v11;
      Qs[dd] = v12;
    }
    float m = -INFINITY, l = 0.0f;
    float o[1];
    for (int j = 0; j < 1; j++) o[j] = 0.0f;
    __syncthreads();
    // The keys the block's rows see, by the mask: [kbeg, kend), or all of
    // them when a row sees none (its softmax spreads over the masked keys).
    long long kbeg = 0, kend = 5LL;
    {
      long long lo = 5LL, hi = 0;
      bool seen = true;
      for (long long i = s; i <= s; i++) {
        long long a = 0, z = 4LL, x;
        x = i;
        if (x < z) z = x;
        if (a > z) seen = false;
        if (a < lo) lo = a;
        if (z + 1 > hi) hi = z + 1;
      }
      if (seen) {
        kbeg = lo;
        kend = hi;
      }
    }
    for (long long t0 = kbeg; t0 < kend; t0 += 32) {
      if (threadIdx.x < 32) {
        long long t = t0 + threadIdx.x;
        float sc = -INFINITY;
        if (t < kend) {
          float dot = 0.0f;
          for (long long dd = 0; dd < 8LL; dd++) {
            float v0 = in1[((((((b1 * 40LL + t * 8LL + dd) / 80LL) % 2LL) * 40LL + (((b1 * 40LL + t * 8LL + dd) / 8LL) % 5LL) * 8LL + ((b1 * 40LL + t * 8LL + dd) % 8LL)) / 40LL) % 2LL) * 40LL + ((((((b1 * 40LL + t * 8LL + dd) / 80LL) % 2LL) * 40LL + (((b1 * 40LL + t * 8LL + dd) / 8LL) % 5LL) * 8LL + ((b1 * 40LL + t * 8LL + dd) % 8LL)) / 8LL) % 5LL) * 8LL + (((((b1 * 40LL + t * 8LL + dd) / 80LL) % 2LL) * 40LL + (((b1 * 40LL + t * 8LL + dd) / 8LL) % 5LL) * 8LL + ((b1 * 40LL + t * 8LL + dd) % 8LL)) % 8LL)];
            float v1 = in3[((((((((b1 * 40LL + t * 8LL + dd) / 80LL) % 2LL) * 40LL + (((b1 * 40LL + t * 8LL + dd) / 8LL) % 5LL) * 8LL + ((b1 * 40LL + t * 8LL + dd) % 8LL)) / 8LL) % 5LL) * 8LL + (((((b1 * 40LL + t * 8LL + dd) / 80LL) % 2LL) * 40LL + (((b1 * 40LL + t * 8LL + dd) / 8LL) % 5LL) * 8LL + ((b1 * 40LL + t * 8LL + dd) % 8LL)) % 8LL)) / 8LL) * 8LL + ((((((((b1 * 40LL + t * 8LL + dd) / 80LL) % 2LL) * 40LL + (((b1 * 40LL + t * 8LL + dd) / 8LL) % 5LL) * 8LL + ((b1 * 40LL + t * 8LL + dd) % 8LL)) / 8LL) % 5LL) * 8LL + (((((b1 * 40LL + t * 8LL + dd) / 80LL) % 2LL) * 40LL + (((b1 * 40LL + t * 8LL + dd) / 8LL) % 5LL) * 8LL + ((b1 * 40LL + t * 8LL + dd) % 8LL)) % 8LL)) % 8LL)];
            float v2 = v1;
            float v3 = v2;
            float v4 = v3;
            float v5 = v0 * v4;
            float v6 = (((((b1 * 40LL + t * 8LL + dd) / 80LL) % 2LL) * 40LL + (((b1 * 40LL + t * 8LL + dd) / 8LL) % 5LL) * 8LL + ((b1 * 40LL + t * 8LL + dd) % 8LL)) % 8LL) < 4LL ? (-((in1[((((((b1 * 40LL + t * 8LL + dd) / 80LL) % 2LL) * 40LL + (((b1 * 40LL + t * 8LL + dd) / 8LL) % 5LL) * 8LL + ((b1 * 40LL + t * 8LL + dd) % 8LL)) / 40LL) % 2LL) * 40LL + ((((((b1 * 40LL + t * 8LL + dd) / 80LL) % 2LL) * 40LL + (((b1 * 40LL + t * 8LL + dd) / 8LL) % 5LL) * 8LL + ((b1 * 40LL + t * 8LL + dd) % 8LL)) / 8LL) % 5LL) * 8LL + ((((((b1 * 40LL + t * 8LL + dd) / 80LL) % 2LL) * 40LL + (((b1 * 40LL + t * 8LL + dd) / 8LL) % 5LL) * 8LL + ((b1 * 40LL + t * 8LL + dd) % 8LL)) % 8LL) + 4LL)]))) : ((in1[((((((b1 * 40LL + t * 8LL + dd) / 80LL) % 2LL) * 40LL + (((b1 * 40LL + t * 8LL + dd) / 8LL) % 5LL) * 8LL + ((b1 * 40LL + t * 8LL + dd) % 8LL)) / 40LL) % 2LL) * 40LL + ((((((b1 * 40LL + t * 8LL + dd) / 80LL) % 2LL) * 40LL + (((b1 * 40LL + t * 8LL + dd) / 8LL) % 5LL) * 8LL + ((b1 * 40LL + t * 8LL + dd) % 8LL)) / 8LL) % 5LL) * 8LL + ((((((b1 * 40LL + t * 8LL + dd) / 80LL) % 2LL) * 40LL + (((b1 * 40LL + t * 8LL + dd) / 8LL) % 5LL) * 8LL + ((b1 * 40LL + t * 8LL + dd) % 8LL)) % 8LL) - 4LL)]));
            float v7 = in4[((((((((b1 * 40LL + t * 8LL + dd) / 80LL) % 2LL) * 40LL + (((b1 * 40LL + t * 8LL + dd) / 8LL) % 5LL) * 8LL + ((b1 * 40LL + t * 8LL + dd) % 8LL)) / 8LL) % 5LL) * 8LL + (((((b1 * 40LL + t * 8LL + dd) / 80LL) % 2LL) * 40LL + (((b1 * 40LL + t * 8LL + dd) / 8LL) % 5LL) * 8LL + ((b1 * 40LL + t * 8LL + dd) % 8LL)) % 8LL)) / 8LL) * 8LL + ((((((((b1 * 40LL + t * 8LL + dd) / 80LL) % 2LL) * 40LL + (((b1 * 40LL + t * 8LL + dd) / 8LL) % 5LL) * 8LL + ((b1 * 40LL + t * 8LL + dd) % 8LL)) / 8LL) % 5LL) * 8LL + (((((b1 * 40LL + t * 8LL + dd) / 80LL) % 2LL) * 40LL + (((b1 * 40LL + t * 8LL + dd) / 8LL) % 5LL) * 8LL + ((b1 * 40LL + t * 8LL + dd) % 8LL)) % 8LL)) % 8LL)];
            float v8 = v7;
            float v9 = v8;
            float v10 = v9;
            float v11 = v6 * v10;
            float v12 = v5 + v11;
            float v13 = v12;
            float v14 = v13;
            float v15 = v14;
            float v16 = v15;
            dot += Qs[dd] * v16;
          }
          float v0 = 0.25f;
          float v1 = v0;
          float v2 = v1;
          float v3 = dot * v2;
          long long v4 = (long long)(((s * 5LL + t) / 5LL));
          long long v5 = 0LL;
          long long v6 = v5;
          long long v7 = v6;
          long long v8 = (long long)((unsigned long long)v4 + (unsigned long long)v7);
          long long v9 = (long long)(((s * 5LL + t) % 5LL));
          bool v10 = v8 >= v9;
          float v11 = 0.0f;
          float v12 = v11;
          float v13 = v12;
          float v14 = -3.40282347e+38f;
          float v15 = v14;
          float v16 = v15;
          float v17 = v10 ? v13 : v16;
          float v18 = v17;
          float v19 = v18;
          float v20 = v3 + v19;
          sc = v20;
        }
        float mx = sc;
        for (int w = 16; w > 0; w >>= 1) { float y = __shfl_xor_sync(0xffffffffu, mx, w); mx = (mx != mx || mx > y) ? mx : y; }
        float mnew = (m != m || m > mx) ? m : mx;
        float pt = sc == -INFINITY ? 0.0f : expf(sc - mnew);
        float ps = pt;
        for (int w = 16; w > 0; w >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, w);
        Ps[threadIdx.x] = pt;
        if (threadIdx.x == 0) {
          float alpha = m == -INFINITY ? 0.0f : expf(m - mnew);
          St[0] = alpha; St[1] = mnew; St[2] = l * alpha + ps;
        }
      }
      __syncthreads();
      float alpha = St[0];
      m = St[1]; l = St[2];
      for (int j = 0; j < 1; j++) {
        long long d = threadIdx.x + j * 128;
        if (d >= 8LL) break;
        float acc = o[j] * alpha;
        for (int tt = 0; tt < 32 && t0 + tt < kend; tt++) {
          long long t = t0 + tt;
          float v0 = in2[((((((b1 * 40LL + t * 8LL + d) / 80LL) % 2LL) * 40LL + (((b1 * 40LL + t * 8LL + d) / 8LL) % 5LL) * 8LL + ((b1 * 40LL + t * 8LL + d) % 8LL)) / 40LL) % 2LL) * 40LL + ((((((b1 * 40LL + t * 8LL + d) / 80LL) % 2LL) * 40LL + (((b1 * 40LL + t * 8LL + d) / 8LL) % 5LL) * 8LL + ((b1 * 40LL + t * 8LL + d) % 8LL)) / 8LL) % 5LL) * 8LL + (((((b1 * 40LL + t * 8LL + d) / 80LL) % 2LL) * 40LL + (((b1 * 40LL + t * 8LL + d) / 8LL) % 5LL) * 8LL + ((b1 * 40LL + t * 8LL + d) % 8LL)) % 8LL)];
          float v1 = v0;
          float v2 = v1;
          float v3 = v2;
          acc += Ps[tt] * v3;
        }
        o[j] = acc;
      }
      __syncthreads();
    }
    for (int j = 0; j < 1; j++) {
      long long d = threadIdx.x + j * 128;
      if (d >= 8LL) break;
      out0[((s * 32LL + b1 * 8LL + d) / 32LL) * 32LL + ((s * 32LL + b1 * 8LL + d) % 32LL)] = (o[j] / l);
    }
    __syncthreads();
  }
}
