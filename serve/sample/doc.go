// Package sample owns token sampling for the serving layer: the request's
// sampling parameters (Params), the counter-based generator that makes a
// seeded request's draws a pure function of (seed, token index) (Uniform,
// Philox4x32), the float64 reference sampler that is the truth (Reference),
// and the CUDA kernel that samples beside the model step (KernelSource),
// with Run to execute it under the CPU emulation (package cuda/emu) when
// there is no GPU. Only token ids and logprobs leave the device.
//
// # Semantics
//
// Reference and kernel implement the same definition. For one row of
// logits l[0..n) (finite or -Inf, with a finite maximum m):
//
//  1. Greedy: when Temperature < MinTemperature (0 included) the token is
//     the argmax of l, ties going to the lowest id. TopK and TopP are
//     ignored.
//  2. Top-k (TopK > 0 and TopK < n): let t be the TopK-th highest logit,
//     counting repeated values once per token; every token with l[i] >= t
//     is kept. Ties at t are all kept, so more than TopK tokens may remain.
//     The comparison is on the raw f32 logits, so reference and kernel
//     agree on it exactly.
//  3. Temperature: each kept token has the weight w[i] = exp((l[i]-m)/T);
//     the maximum's weight is 1.
//  4. Top-p (TopP < 1), after top-k: let Z be the kept tokens' total
//     weight. The threshold is the highest logit value v among the kept
//     tokens such that the weight of the kept tokens with l[i] >= v reaches
//     TopP*Z (>=); the tokens below v are dropped. All tokens tied at v
//     stay, so the set is the smallest such set up to ties.
//  5. Draw: u = Uniform(Seed, index) in [0, 1); M is the total weight of
//     the tokens still kept; the token is the first kept id i, in
//     increasing id order, at which the cumulative weight up to and
//     including i exceeds u*M (>). Should rounding leave none, it is the
//     last kept id.
//
// The logprob returned with a token, greedy or sampled, is the model's raw
// log-probability log_softmax(l)[token], before temperature, top-k and
// top-p, as OpenAI-compatible servers report it.
//
// # Precision
//
// Reference computes in float64. The kernel reads f32 logits, computes each
// weight in f32 (subtraction, division by the f32 temperature, expf) and
// accumulates weights in f64; u and the comparisons with u*M and TopP*Z
// are f64. Each weight is thus within a few f32 ulps of the reference's
// (relative error about eps32*(3+2|x|) for x = (l-m)/T), and every sum
// within eps32 times the sum of w*(1+|x|): the kernel picks the
// reference's token except where u*M, or TopP*Z, lies that close to a
// cumulative boundary. The tests derive their tolerance from this bound.
package sample
