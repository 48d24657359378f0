// Package timing holds what every timing loop of lumsearch shares: the
// median and interquartile range of a sample, and the rule that says when
// to stop repeating a measurement (enough samples whose spread is small,
// or a time cap). The GPU timings (gpu.Program.Time, measure.GPU) and the
// emulated ones (measure.Emulated, lumsearch bench --measure emulated)
// repeat by the same rule, so their numbers mean the same thing.
package timing

import (
	"fmt"
	"slices"
	"time"
)

// Defaults of a zero Rule's fields.
const (
	DefaultMin     = 5
	DefaultMax     = 1000
	DefaultSpread  = 0.02
	DefaultMaxTime = 2 * time.Second
)

// Rule says when a repeated measurement has enough samples: at least Min,
// then as soon as the interquartile range is below Spread times the
// median (the times have settled), or once MaxTime has passed since the
// first sample, or at Max samples. Zero fields take the defaults above.
type Rule struct {
	Min     int
	Max     int
	Spread  float64
	MaxTime time.Duration
	// Now reads the clock; nil means time.Now. Tests set it to a fake
	// clock so that no test depends on how fast the machine is.
	Now func() time.Time
}

// withDefaults fills in the zero fields.
func (r Rule) withDefaults() Rule {
	if r.Min <= 0 {
		r.Min = DefaultMin
	}
	if r.Max <= 0 {
		r.Max = DefaultMax
	}
	r.Max = max(r.Max, r.Min)
	if r.Spread <= 0 {
		r.Spread = DefaultSpread
	}
	if r.MaxTime <= 0 {
		r.MaxTime = DefaultMaxTime
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	return r
}

// Stable reports whether samples are enough by count and spread alone:
// at least Min of them, with IQR/median below Spread.
func (r Rule) Stable(samples []float64) bool {
	r = r.withDefaults()
	if len(samples) < r.Min {
		return false
	}
	med, iqr := MedianIQR(samples)
	if med <= 0 {
		// Nothing measurable (a zero time) cannot get more stable.
		return iqr == 0
	}
	return iqr/med < r.Spread
}

// Repeat calls sample until the rule is met and returns the samples in
// the order taken.
func (r Rule) Repeat(sample func() (float64, error)) ([]float64, error) {
	series, err := r.RepeatEach(1, func() ([]float64, error) {
		x, err := sample()
		return []float64{x}, err
	})
	if err != nil {
		return nil, err
	}
	return series[0], nil
}

// RepeatEach is Repeat for n quantities measured together (the launches
// of one run, each timed by its own events): each call of sample returns
// one sample of each, and the loop stops once all n are stable, or at the
// time cap or Max. It returns the samples by quantity.
func (r Rule) RepeatEach(n int, sample func() ([]float64, error)) ([][]float64, error) {
	r = r.withDefaults()
	series := make([][]float64, n)
	began := r.Now()
	for {
		xs, err := sample()
		if err != nil {
			return nil, err
		}
		if len(xs) != n {
			return nil, fmt.Errorf("timing: a sample of %d quantities has %d", n, len(xs))
		}
		for i, x := range xs {
			series[i] = append(series[i], x)
		}
		taken := len(series[0])
		if taken < r.Min {
			continue
		}
		if taken >= r.Max || r.Now().Sub(began) >= r.MaxTime {
			return series, nil
		}
		stable := true
		for _, s := range series {
			stable = stable && r.Stable(s)
		}
		if stable {
			return series, nil
		}
	}
}

// MedianIQR is the median and interquartile range (third quartile less
// first, quartiles interpolated linearly) of xs; zeros for no samples.
func MedianIQR(xs []float64) (median, iqr float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	q := func(p float64) float64 {
		x := p * float64(len(s)-1)
		i := int(x)
		if i+1 >= len(s) {
			return s[len(s)-1]
		}
		return s[i] + (x-float64(i))*(s[i+1]-s[i])
	}
	return q(0.5), q(0.75) - q(0.25)
}
