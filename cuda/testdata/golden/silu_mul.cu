// golden kernel silu_mul
extern "C" __global__ void silu_mul(const float* __restrict__ in0, const float* __restrict__ in1, float* __restrict__ out0) {
  for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < 1000LL; q += (long long)gridDim.x * blockDim.x) {
      float4 a0 = lum_ld4(in0 + 4 * q);
      float4 a1 = lum_ld4(in1 + 4 * q);
      float v0 = (a0.x >= 0.0f ? 1.0f / (1.0f + expf(-a0.x)) : expf(a0.x) / (1.0f + expf(a0.x)));
      float v1 = a0.x * v0;
      float v2 = v1 * a1.x;
      float v3 = (a0.y >= 0.0f ? 1.0f / (1.0f + expf(-a0.y)) : expf(a0.y) / (1.0f + expf(a0.y)));
      float v4 = a0.y * v3;
      float v5 = v4 * a1.y;
      float v6 = (a0.z >= 0.0f ? 1.0f / (1.0f + expf(-a0.z)) : expf(a0.z) / (1.0f + expf(a0.z)));
      float v7 = a0.z * v6;
      float v8 = v7 * a1.z;
      float v9 = (a0.w >= 0.0f ? 1.0f / (1.0f + expf(-a0.w)) : expf(a0.w) / (1.0f + expf(a0.w)));
      float v10 = a0.w * v9;
      float v11 = v10 * a1.w;
      lum_st4(out0 + 4 * q, make_float4(v2, v5, v8, v11));
  }
}
