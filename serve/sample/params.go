package sample

import (
	"fmt"
	"math"
)

// MinTemperature is the smallest temperature that samples: below it a
// request is greedy. (As vLLM does: dividing by a tinier temperature only
// makes the f32 weights overflow or vanish, and the result is the argmax
// anyway.)
const MinTemperature = 1e-5

// MaxLogprobs is the most top logprobs a request may ask for (OpenAI's
// limit for top_logprobs).
const MaxLogprobs = 20

// Params are one request's sampling parameters, named after the OpenAI
// request fields. The zero value is not valid (TopP 0); use DefaultParams.
type Params struct {
	// Temperature divides the logits before the softmax; below
	// MinTemperature (0 included) the request is greedy. In [0, 2].
	Temperature float64
	// TopK keeps the TopK highest logits (ties kept, see the package
	// comment); -1 or 0 turns it off.
	TopK int
	// TopP keeps the smallest set of most probable tokens whose probability
	// reaches TopP; 1 turns it off. In (0, 1].
	TopP float64
	// Seed seeds the request's draws: the draw for the token at index i is
	// Uniform(Seed, i), whatever the batch or schedule.
	Seed uint64
	// Logprobs is how many top logprobs the request asks for, in [0, 20].
	// The sampler always returns the chosen token's logprob; the
	// alternatives are the caller's to compute.
	Logprobs int
}

// DefaultParams returns OpenAI's defaults: temperature 1, top_p 1, no top-k.
func DefaultParams() Params { return Params{Temperature: 1, TopP: 1} }

// Validate reports the first field out of range, in the request's terms.
func (p Params) Validate() error {
	// The negated comparisons also reject NaN.
	if !(p.Temperature >= 0 && p.Temperature <= 2) {
		return fmt.Errorf("temperature must be in [0, 2], got %v", p.Temperature)
	}
	if !(p.TopP > 0 && p.TopP <= 1) {
		return fmt.Errorf("top_p must be in (0, 1], got %v", p.TopP)
	}
	if p.TopK < -1 || p.TopK > math.MaxInt32 {
		return fmt.Errorf("top_k must be -1 or 0 (off) or in [1, %d], got %d", math.MaxInt32, p.TopK)
	}
	if p.Logprobs < 0 || p.Logprobs > MaxLogprobs {
		return fmt.Errorf("top_logprobs must be in [0, %d], got %d", MaxLogprobs, p.Logprobs)
	}
	return nil
}

// greedy reports whether the request takes the argmax.
func (p Params) greedy() bool { return p.Temperature < MinTemperature }

// topK returns the top-k cut for a vocabulary of n tokens, 0 when off.
func (p Params) topK(n int) int {
	if p.TopK <= 0 || p.TopK >= n {
		return 0
	}
	return p.TopK
}

// topP32 is TopP as the kernel receives it: a value below 1 must stay below
// 1 in f32, or the kernel would skip a top-p cut the reference makes.
func (p Params) topP32() float32 {
	if p.TopP >= 1 {
		return 1
	}
	return min(float32(p.TopP), math.Nextafter32(1, 0))
}

// KernelArgs is what the kernel receives of p for a vocabulary of vocab
// ids: the temperature (0 for a greedy request), top-k (0 for off) and
// top-p (1 for off), as Run passes them; a caller launching the kernel
// on a device passes the same.
func (p Params) KernelArgs(vocab int) (temperature float32, topK int32, topP float32) {
	if !p.greedy() {
		temperature = float32(p.Temperature)
	}
	return temperature, int32(p.topK(vocab)), p.topP32()
}
