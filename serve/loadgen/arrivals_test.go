package loadgen

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestScheduleFixed(t *testing.T) {
	tests := []struct {
		rate float64
		n    int
		want []time.Duration
	}{
		{4, 4, []time.Duration{0, 250 * time.Millisecond, 500 * time.Millisecond, 750 * time.Millisecond}},
		{0.5, 3, []time.Duration{0, 2 * time.Second, 4 * time.Second}},
		{0, 3, []time.Duration{0, 0, 0}},
		{math.Inf(1), 2, []time.Duration{0, 0}},
		{10, 1, []time.Duration{0}},
		{10, 0, []time.Duration{}},
	}
	for _, tt := range tests {
		got, err := Schedule(tt.n, tt.rate, Fixed, 1)
		require.NoError(t, err)
		assert.Equal(t, tt.want, got, "rate %v", tt.rate)
	}
}

// TestScheduleFixedNoDrift: a long run at an awkward rate stays on 1/rate
// spacing to the nanosecond.
func TestScheduleFixedNoDrift(t *testing.T) {
	got, err := Schedule(30001, 3, Fixed, 1)
	require.NoError(t, err)
	assert.InDelta(t, float64(10000*time.Second), float64(got[30000]), 2)
}

func TestSchedulePoisson(t *testing.T) {
	const n, rate = 20001, 50.0
	got, err := Schedule(n, rate, Poisson, 42)
	require.NoError(t, err)
	require.Len(t, got, n)
	assert.Zero(t, got[0], "the first request goes at once")
	var sum, sumSq float64
	for i := 1; i < n; i++ {
		gap := (got[i] - got[i-1]).Seconds()
		require.GreaterOrEqual(t, gap, 0.0)
		sum += gap
		sumSq += gap * gap
	}
	mean := sum / (n - 1)
	// Exponential gaps have a standard deviation equal to their mean: the
	// mean of 20000 is within 2% of 1/rate at over 4 sigma.
	assert.InEpsilon(t, 1/rate, mean, 0.03)
	sd := math.Sqrt(sumSq/(n-1) - mean*mean)
	assert.InEpsilon(t, 1/rate, sd, 0.05, "exponential, not fixed, gaps")

	again, err := Schedule(n, rate, Poisson, 42)
	require.NoError(t, err)
	assert.Equal(t, got, again, "a seed gives one schedule")
	other, err := Schedule(n, rate, Poisson, 43)
	require.NoError(t, err)
	assert.NotEqual(t, got, other)
}

func TestScheduleErrors(t *testing.T) {
	tests := []struct {
		name     string
		n        int
		rate     float64
		arrivals Arrivals
		err      string
	}{
		{"negative count", -1, 1, Fixed, "-1 requests"},
		{"negative rate", 2, -1, Fixed, "rate -1"},
		{"NaN rate", 2, math.NaN(), Poisson, "rate NaN"},
		{"unknown arrivals", 2, 1, "burst", `arrivals "burst"`},
		{"overflow", 3, 1e-300, Fixed, "beyond a time.Duration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Schedule(tt.n, tt.rate, tt.arrivals, 1)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.err)
		})
	}
}
