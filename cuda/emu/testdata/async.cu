// Test kernels for cp.async groups: lum_cp_async16, lum_cp_async_commit,
// lum_cp_async_wait_group and lum_cp_async_wait under every landing. Written
// as the printer writes kernels (no #include, no asm); package cuda compiles
// this file with NVRTC too, which checks that its prelude has these names.

// cp_groups: thread t fills its four slots s[t][0..3] with -1, then copies
// chunk 4t + j of src (16 bytes) into slot j: slots 0, 1 and 2 in groups of
// their own, slot 3 uncommitted. It records its slots after
// wait_group<1> (in seen[0]), after wait_group<0> (seen[1]) and after
// wait_all (seen[2]); seen[i] is laid out [thread][slot][4].
extern "C" __global__ void cp_groups(const float* __restrict__ src, float* __restrict__ seen) {
  __shared__ __align__(16) float s[64][4][4];
  const unsigned t = threadIdx.x, T = blockDim.x;
  for (int j = 0; j < 4; j++)
    for (int q = 0; q < 4; q++) s[t][j][q] = -1.0f;
  for (int j = 0; j < 4; j++) {
    lum_cp_async16(s[t][j], src + (4 * t + j) * 4);
    if (j < 3) lum_cp_async_commit();
  }
  float* out = seen + (size_t)blockIdx.x * 3 * T * 16;
  lum_cp_async_wait_group<1>();
  for (int j = 0; j < 16; j++) out[t * 16 + j] = s[t][j / 4][j % 4];
  lum_cp_async_wait_group<0>();
  for (int j = 0; j < 16; j++) out[(T + t) * 16 + j] = s[t][j / 4][j % 4];
  lum_cp_async_wait();
  for (int j = 0; j < 16; j++) out[(2 * T + t) * 16 + j] = s[t][j / 4][j % 4];
}

// The pipelines below sum tiles of 16-byte chunks, blockDim.x chunks a tile,
// `tiles` tiles a block: thread t adds up chunk (t + 1) % blockDim.x of
// every tile of its block (a chunk another thread copied) into out[4t..4t+3]
// of its block, tile after tile. buf holds S stages of up to 64 chunks.

// refill_same waits for tile k (wait_group<S - 1>: S tiles are in flight),
// reads it, and refills the same stage with tile k + S. The refill must wait
// until every thread has read the stage: BARRIER false drops that barrier,
// a write-after-read race on the stage being refilled.
template <int S, bool BARRIER>
__device__ __forceinline__ void refill_same(const float* src, float* out, int tiles, float (*buf)[64][4]) {
  const unsigned t = threadIdx.x, T = blockDim.x, u = (t + 1) % T;
  const float* mine = src + (size_t)blockIdx.x * tiles * T * 4;
  for (int s = 0; s < S; s++) {
    if (s < tiles) lum_cp_async16(buf[s][t], mine + ((size_t)s * T + t) * 4);
    lum_cp_async_commit();
  }
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int k = 0; k < tiles; k++) {
    lum_cp_async_wait_group<S - 1>();
    __syncthreads();
    for (int q = 0; q < 4; q++) acc[q] += buf[k % S][u][q];
    if (BARRIER) __syncthreads();
    if (k + S < tiles) lum_cp_async16(buf[k % S][t], mine + ((size_t)(k + S) * T + t) * 4);
    lum_cp_async_commit();
  }
  for (int q = 0; q < 4; q++) out[((size_t)blockIdx.x * T + t) * 4 + q] = acc[q];
}

// refill_prev keeps S - 1 tiles in flight: at step k it waits with
// wait_group<WAIT>, refills the stage read at step k - 1 with tile k + S - 1
// after the barrier, and reads tile k. WAIT = S - 2 completes tile k's
// group; S - 1 waits one stage too few.
template <int S, int WAIT>
__device__ __forceinline__ void refill_prev(const float* src, float* out, int tiles, float (*buf)[64][4]) {
  const unsigned t = threadIdx.x, T = blockDim.x, u = (t + 1) % T;
  const float* mine = src + (size_t)blockIdx.x * tiles * T * 4;
  for (int s = 0; s < S - 1; s++) {
    if (s < tiles) lum_cp_async16(buf[s][t], mine + ((size_t)s * T + t) * 4);
    lum_cp_async_commit();
  }
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int k = 0; k < tiles; k++) {
    lum_cp_async_wait_group<WAIT>();
    __syncthreads();
    const int nk = k + S - 1;
    if (nk < tiles) lum_cp_async16(buf[nk % S][t], mine + ((size_t)nk * T + t) * 4);
    lum_cp_async_commit();
    for (int q = 0; q < 4; q++) acc[q] += buf[k % S][u][q];
  }
  for (int q = 0; q < 4; q++) out[((size_t)blockIdx.x * T + t) * 4 + q] = acc[q];
}

extern "C" __global__ void pipe_refill_ok(const float* __restrict__ src, float* __restrict__ out, int tiles) {
  __shared__ __align__(16) float buf[3][64][4];
  refill_same<3, true>(src, out, tiles, buf);
}

extern "C" __global__ void pipe_refill_racy(const float* __restrict__ src, float* __restrict__ out, int tiles) {
  __shared__ __align__(16) float buf[3][64][4];
  refill_same<3, false>(src, out, tiles, buf);
}

extern "C" __global__ void pipe_stage_ok(const float* __restrict__ src, float* __restrict__ out, int tiles) {
  __shared__ __align__(16) float buf[3][64][4];
  refill_prev<3, 1>(src, out, tiles, buf);
}

extern "C" __global__ void pipe_stage_short(const float* __restrict__ src, float* __restrict__ out, int tiles) {
  __shared__ __align__(16) float buf[3][64][4];
  refill_prev<3, 2>(src, out, tiles, buf);
}

// cp_twice copies into one destination twice without waiting in between.
extern "C" __global__ void cp_twice(const float* __restrict__ src, float* __restrict__ out) {
  __shared__ __align__(16) float s[4];
  lum_cp_async16(s, src);
  lum_cp_async_commit();
  lum_cp_async16(s, src + 4);
  lum_cp_async_wait();
  out[0] = s[0];
}
