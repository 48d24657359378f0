package sample

import "github.com/lumsearch/lumsearch/cuda/emu"

// KernelName is the sampling kernel's entry point in KernelSource.
const KernelName = "lum_sample"

// BlockThreads is the block size the kernel requires: one block of
// BlockThreads threads per sequence. A launch with another block size
// writes nothing.
const BlockThreads = 256

// EmuKernel describes the kernel's parameters for package cuda/emu, in
// order:
// the logits [S, stride] f32 (vocab of each row read), the row stride in
// elements, the vocabulary size, the per-row temperature (f32, <= 0 means
// greedy; the caller maps temperatures below MinTemperature to 0), top-k
// (i32, <= 0 off), top-p (f32, >= 1 off), seed and token index (u64), and
// the outputs: token id (i32) and raw logprob (f32) per row. Each call
// returns a fresh copy.
func EmuKernel() emu.Kernel {
	return emu.Kernel{Name: KernelName, Params: []emu.Param{
		{Name: "logits", Type: "const float*"},
		{Name: "stride", Type: "long long"},
		{Name: "vocab", Type: "int"},
		{Name: "temperature", Type: "const float*"},
		{Name: "top_k", Type: "const int*"},
		{Name: "top_p", Type: "const float*"},
		{Name: "seed", Type: "const unsigned long long*"},
		{Name: "index", Type: "const unsigned long long*"},
		{Name: "token", Type: "int*"},
		{Name: "logprob", Type: "float*"},
	}}
}

// KernelSource returns the CUDA C text of the sampling kernel: no
// #include and no asm, so that NVRTC compiles it alone and the emulation
// (package cuda/emu) unchanged. Launch it with a grid of S blocks of
// BlockThreads threads.
//
// The block finds, with shared-memory tree reductions, the maximum and
// argmax, the raw softmax sum (for the logprob), the top-k threshold and
// the top-p threshold, each threshold by a bitwise search over the logits'
// order-preserving 32-bit keys (32 counting or summing passes: exact
// selection, no sort, no atomics). The draw splits the vocabulary into
// BlockThreads contiguous chunks: thread 0 scans the chunks' sums in id
// order, and the thread whose chunk holds u*M rescans it.
//
// Cost: a sampled row with both cuts reads its logits about 68 times (two
// passes, 32 per threshold search, the draw), each pass ending in a block
// reduction; greedy rows read them twice. At vocabularies of 10^5 that is
// tens of MB per row from L2; a radix select (four 8-bit histogram passes
// per threshold) would cut it when it matters.
func KernelSource() string { return kernelSource }

const kernelSource = `// lumsearch serve/sample: token sampling, one block per sequence.
#define LUM_SAMPLE_THREADS 256

// lum_sample_key maps a float to a 32-bit key with the same order (-0 as
// +0, so that equal logits have equal keys).
__device__ __forceinline__ unsigned lum_sample_key(float f) {
  unsigned b = __float_as_uint(f);
  if (b == 0x80000000u) b = 0u;
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// lum_sample_u is Philox4x32-10 of counter (index, 0) under key seed, its
// first two words' top 53 bits as a double in [0, 1): package sample's
// Uniform.
__device__ __forceinline__ double lum_sample_u(unsigned long long seed, unsigned long long index) {
  unsigned c0 = (unsigned)index, c1 = (unsigned)(index >> 32), c2 = 0u, c3 = 0u;
  unsigned k0 = (unsigned)seed, k1 = (unsigned)(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    unsigned long long p0 = 0xD2511F53ull * c0, p1 = 0xCD9E8D57ull * c2;
    unsigned n0 = (unsigned)(p1 >> 32) ^ c1 ^ k0, n2 = (unsigned)(p0 >> 32) ^ c3 ^ k1;
    c1 = (unsigned)p1;
    c3 = (unsigned)p0;
    c0 = n0;
    c2 = n2;
  }
  unsigned long long bits = ((unsigned long long)c1 << 32) | c0;
  return (double)(bits >> 11) * (1.0 / 9007199254740992.0);
}

// lum_sample_weight is exp((l-m)/t) in f32: the one expression every pass
// uses, so that the passes agree bit for bit.
__device__ __forceinline__ float lum_sample_weight(float l, float m, float t) { return expf((l - m) / t); }

// lum_sample_sum returns the block's sum of v; s is LUM_SAMPLE_THREADS
// doubles of shared memory, free again when it returns.
__device__ __forceinline__ double lum_sample_sum(double v, double* s) {
  const unsigned t = threadIdx.x;
  s[t] = v;
  __syncthreads();
  for (unsigned k = LUM_SAMPLE_THREADS / 2; k > 0; k >>= 1) {
    if (t < k) s[t] += s[t + k];
    __syncthreads();
  }
  const double r = s[0];
  __syncthreads();
  return r;
}

extern "C" __global__ void lum_sample(const float* __restrict__ logits, long long stride, int vocab,
                                      const float* __restrict__ temperature, const int* __restrict__ top_k,
                                      const float* __restrict__ top_p, const unsigned long long* __restrict__ seed,
                                      const unsigned long long* __restrict__ index, int* __restrict__ token,
                                      float* __restrict__ logprob) {
  __shared__ double s_sum[LUM_SAMPLE_THREADS];
  __shared__ float s_max[LUM_SAMPLE_THREADS];
  __shared__ int s_arg[LUM_SAMPLE_THREADS];
  __shared__ double s_incl[LUM_SAMPLE_THREADS];
  __shared__ int s_pick;
  __shared__ double s_target;
  __shared__ int s_fallback;
  if (blockDim.x != LUM_SAMPLE_THREADS) return;
  const int t = (int)threadIdx.x, row = (int)blockIdx.x, n = vocab;
  const float* __restrict__ x = logits + (long long)row * stride;

  // Maximum and argmax, ties to the lowest id: each thread sees its ids in
  // increasing order, and the tree prefers the lower id among equals.
  float bv = __uint_as_float(0xff800000u);
  int bi = n;
  for (int i = t; i < n; i += LUM_SAMPLE_THREADS) {
    const float v = x[i];
    if (v > bv || (v == bv && i < bi)) {
      bv = v;
      bi = i;
    }
  }
  s_max[t] = bv;
  s_arg[t] = bi;
  __syncthreads();
  for (int k = LUM_SAMPLE_THREADS / 2; k > 0; k >>= 1) {
    if (t < k) {
      const float ov = s_max[t + k];
      const int oi = s_arg[t + k];
      if (ov > s_max[t] || (ov == s_max[t] && oi < s_arg[t])) {
        s_max[t] = ov;
        s_arg[t] = oi;
      }
    }
    __syncthreads();
  }
  const float m = s_max[0];
  const int argmax = s_arg[0];
  __syncthreads();

  // The raw softmax sum, for the logprob.
  double acc = 0.0;
  for (int i = t; i < n; i += LUM_SAMPLE_THREADS) acc += (double)expf(x[i] - m);
  const double raw = lum_sample_sum(acc, s_sum);

  const float temp = temperature[row];
  if (!(temp > 0.0f)) {
    if (t == 0) {
      token[row] = argmax;
      logprob[row] = (float)((double)(x[argmax] - m) - log(raw));
    }
    return;
  }

  // Top-k: the largest key kk with at least k keys >= kk is the k-th
  // highest logit's key; keys >= kk stay.
  unsigned kk = 0u;
  const int k = top_k[row];
  if (k > 0 && k < n) {
    for (int bit = 31; bit >= 0; --bit) {
      const unsigned cand = kk | (1u << bit);
      double c = 0.0;
      for (int i = t; i < n; i += LUM_SAMPLE_THREADS) c += lum_sample_key(x[i]) >= cand ? 1.0 : 0.0;
      if (lum_sample_sum(c, s_sum) >= (double)k) kk = cand;
    }
  }

  // Top-p: the largest key kp whose kept weight (keys >= max(kp, kk))
  // reaches p*Z. The kept weight only falls as kp rises (non-negative
  // terms, the same order of addition), so the bitwise search is exact
  // for the sums the block computes.
  unsigned thr = kk;
  const float p = top_p[row];
  if (p < 1.0f) {
    acc = 0.0;
    for (int i = t; i < n; i += LUM_SAMPLE_THREADS) {
      const float v = x[i];
      if (lum_sample_key(v) >= kk) acc += (double)lum_sample_weight(v, m, temp);
    }
    const double goal = (double)p * lum_sample_sum(acc, s_sum);
    unsigned kp = 0u;
    for (int bit = 31; bit >= 0; --bit) {
      const unsigned cand = kp | (1u << bit), lo = cand > kk ? cand : kk;
      acc = 0.0;
      for (int i = t; i < n; i += LUM_SAMPLE_THREADS) {
        const float v = x[i];
        if (lum_sample_key(v) >= lo) acc += (double)lum_sample_weight(v, m, temp);
      }
      if (lum_sample_sum(acc, s_sum) >= goal) kp = cand;
    }
    thr = kp > kk ? kp : kk;
  }

  // The draw: contiguous chunks in id order, their sums scanned by thread
  // 0, the chunk that holds u*M rescanned by its thread with the same
  // additions, so that it finds the token its sum promised.
  const int chunk = (n + LUM_SAMPLE_THREADS - 1) / LUM_SAMPLE_THREADS;
  const int lo = t * chunk < n ? t * chunk : n, hi = lo + chunk < n ? lo + chunk : n;
  acc = 0.0;
  for (int i = lo; i < hi; ++i) {
    const float v = x[i];
    if (lum_sample_key(v) >= thr) acc += (double)lum_sample_weight(v, m, temp);
  }
  s_incl[t] = acc;
  __syncthreads();
  if (t == 0) {
    double c = 0.0;
    int last = 0;
    for (int j = 0; j < LUM_SAMPLE_THREADS; ++j) {
      if (s_incl[j] > 0.0) last = j;
      c += s_incl[j];
      s_incl[j] = c;
    }
    const double target = lum_sample_u(seed[row], index[row]) * c;
    int pick = -1;
    for (int j = 0; j < LUM_SAMPLE_THREADS && pick < 0; ++j)
      if (s_incl[j] > target) pick = j;
    // Rounding may leave u*M at or past the total: then the last kept
    // token, which the rescan of the last non-empty chunk ends on.
    s_pick = pick >= 0 ? pick : last;
    s_fallback = pick < 0;
    s_target = target;
  }
  __syncthreads();
  if (t == s_pick) {
    const double before = t > 0 ? s_incl[t - 1] : 0.0, target = s_target;
    const bool fallback = s_fallback;
    double r = 0.0;
    int tok = -1;
    for (int i = lo; i < hi; ++i) {
      const float v = x[i];
      if (lum_sample_key(v) < thr) continue;
      const float w = lum_sample_weight(v, m, temp);
      if (!(w > 0.0f)) continue;
      r += (double)w;
      tok = i;
      if (!fallback && before + r > target) break;
    }
    token[row] = tok;
    logprob[row] = (float)((double)(x[tok] - m) - log(raw));
  }
}
`
