package timing

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMedianIQR(t *testing.T) {
	for _, tc := range []struct {
		xs       []float64
		med, iqr float64
	}{
		{nil, 0, 0},
		{[]float64{3}, 3, 0},
		{[]float64{4, 1, 3, 2}, 2.5, 1.5},
		{[]float64{5, 1, 4, 2, 3}, 3, 2},
	} {
		med, iqr := MedianIQR(tc.xs)
		assert.InDelta(t, tc.med, med, 1e-12, "%v", tc.xs)
		assert.InDelta(t, tc.iqr, iqr, 1e-12, "%v", tc.xs)
	}
}

// fakeClock advances by step at every reading, so the time cap is reached
// after a known number of samples whatever the machine's speed.
func fakeClock(step time.Duration) func() time.Time {
	now := time.Unix(0, 0)
	return func() time.Time {
		now = now.Add(step)
		return now
	}
}

// TestRepeatStops feeds deterministic sequences of times and checks after
// how many samples each rule stops.
func TestRepeatStops(t *testing.T) {
	noisy := []float64{1, 2, 1, 3, 1, 2, 1, 3, 1, 2, 1, 3, 1, 2, 1, 3}
	settling := []float64{5, 1, 2, 1, 1, 1, 1, 1, 1, 1}
	for _, tc := range []struct {
		name string
		rule Rule
		xs   []float64
		want int
	}{
		{"steady times stop at the minimum", Rule{Min: 5}, []float64{1, 1, 1, 1, 1, 1, 1}, 5},
		{"outliers wait for the quartiles to settle", Rule{Min: 5}, settling, 9},
		{"noise runs to Max", Rule{Min: 3, Max: 9}, noisy, 9},
		{"noise runs to the time cap", Rule{Min: 3, MaxTime: 10 * time.Second, Now: fakeClock(time.Second)}, noisy, 12},
		{"the minimum comes first even past the cap", Rule{Min: 6, MaxTime: time.Nanosecond, Now: fakeClock(time.Second)}, noisy, 6},
		{"a loose spread stops early", Rule{Min: 4, Spread: 0.8}, noisy, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i := 0
			got, err := tc.rule.Repeat(func() (float64, error) {
				require.Less(t, i, len(tc.xs), "asked for more samples than the sequence has")
				i++
				return tc.xs[i-1], nil
			})
			require.NoError(t, err)
			assert.Equal(t, tc.xs[:tc.want], got)
		})
	}
}

// TestRepeatEach stops only when every quantity is stable.
func TestRepeatEach(t *testing.T) {
	rows := [][]float64{{1, 5}, {1, 1}, {1, 2}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {1, 1}}
	i := 0
	got, err := Rule{Min: 3}.RepeatEach(2, func() ([]float64, error) {
		i++
		return rows[i-1], nil
	})
	require.NoError(t, err)
	assert.Equal(t, [][]float64{{1, 1, 1, 1, 1, 1, 1, 1, 1}, {5, 1, 2, 1, 1, 1, 1, 1, 1}}, got)

	boom := errors.New("boom")
	_, err = Rule{}.RepeatEach(1, func() ([]float64, error) { return nil, boom })
	assert.ErrorIs(t, err, boom)
	_, err = Rule{}.RepeatEach(2, func() ([]float64, error) { return []float64{1}, nil })
	assert.ErrorContains(t, err, "a sample of 2 quantities has 1")
}
