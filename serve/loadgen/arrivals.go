package loadgen

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Arrivals is how requests are spaced at a given rate.
type Arrivals string

// The arrival processes.
const (
	// Poisson spaces requests by exponential gaps of mean 1/rate, as
	// independent users would: bursts and lulls at the same mean rate.
	Poisson Arrivals = "poisson"
	// Fixed spaces requests exactly 1/rate apart.
	Fixed Arrivals = "fixed"
)

// Schedule returns when each of n requests is sent, as offsets from the
// start: the first at 0, then gaps of 1/rate (Fixed) or exponential gaps of
// mean 1/rate drawn from a generator seeded with seed (Poisson), so that a
// seed always gives the same schedule. A rate of 0 or +Inf sends all at
// once (every offset 0).
func Schedule(n int, rate float64, arrivals Arrivals, seed int64) ([]time.Duration, error) {
	if n < 0 {
		return nil, fmt.Errorf("schedule: %d requests: want a count >= 0", n)
	}
	if math.IsNaN(rate) || rate < 0 {
		return nil, fmt.Errorf("schedule: rate %v: want requests per second >= 0 (0 or +Inf for all at once)", rate)
	}
	if arrivals != Poisson && arrivals != Fixed {
		return nil, fmt.Errorf("schedule: arrivals %q: want %q or %q", arrivals, Poisson, Fixed)
	}
	out := make([]time.Duration, n)
	if rate == 0 || math.IsInf(rate, 1) {
		return out, nil
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6c6f616467656e)) // "loadgen"
	// Sum in float seconds and convert each offset once, so that rounding
	// to nanoseconds does not accumulate over a long run.
	at := 0.0
	for i := 1; i < n; i++ {
		gap := 1 / rate
		if arrivals == Poisson {
			gap = rng.ExpFloat64() / rate
		}
		at += gap
		ns := at * float64(time.Second)
		if ns >= math.MaxInt64 {
			return nil, fmt.Errorf("schedule: rate %v: request %d would start after %v seconds, beyond a time.Duration", rate, i, at)
		}
		out[i] = time.Duration(ns)
	}
	return out, nil
}
