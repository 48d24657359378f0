package loadgen

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const ms = time.Millisecond

func TestPercentile(t *testing.T) {
	tests := []struct {
		name   string
		sorted []float64
		p      float64
		want   float64
	}{
		{"empty", nil, 50, 0},
		{"one value", []float64{7}, 99, 7},
		{"min", []float64{1, 2, 3, 4}, 0, 1},
		{"max", []float64{1, 2, 3, 4}, 100, 4},
		{"median of odd", []float64{1, 2, 3, 4, 5}, 50, 3},
		{"median of even interpolates", []float64{1, 2, 3, 4}, 50, 2.5},
		{"p90 of 1..10", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 90, 9.1},
		{"p99 of 1..100", seq(100), 99, 99.01},
		{"p99 of 0 and 100", []float64{0, 100}, 99, 99},
		{"p clamped below", []float64{1, 2}, -5, 1},
		{"p clamped above", []float64{1, 2}, 500, 2},
		{"ties", []float64{3, 3, 3, 9}, 50, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.InDelta(t, tt.want, Percentile(tt.sorted, tt.p), 1e-9)
		})
	}
}

// seq is 1..n.
func seq(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(i + 1)
	}
	return out
}

func TestSummarize(t *testing.T) {
	got := Summarize([]time.Duration{40 * ms, 10 * ms, 30 * ms, 20 * ms})
	assert.Equal(t, Stats{Count: 4, Min: 10, Mean: 25, P50: 25, P90: 37, P99: 39.7, Max: 40}, roundStats(got))
	assert.Equal(t, Stats{}, Summarize(nil))
}

// roundStats rounds s to a microsecond, so that float noise does not fail
// an equality.
func roundStats(s Stats) Stats {
	r := func(x float64) float64 {
		return float64(time.Duration(x*float64(ms)).Round(time.Microsecond)) / float64(ms)
	}
	return Stats{Count: s.Count, Min: r(s.Min), Mean: r(s.Mean), P50: r(s.P50), P90: r(s.P90), P99: r(s.P99), Max: r(s.Max)}
}

func TestMeasure(t *testing.T) {
	tests := []struct {
		name string
		s    sample
		want timing
	}{
		{"usage counts the tokens",
			sample{chunks: []time.Duration{50 * ms, 60 * ms, 80 * ms}, done: 90 * ms, usage: &usage{CompletionTokens: 5}},
			timing{latency: 90 * ms, ttft: 50 * ms, tpot: 10 * ms, hasTTFT: true, hasTPOT: true, itl: []time.Duration{10 * ms, 20 * ms}}},
		{"chunks count the tokens without usage",
			sample{chunks: []time.Duration{50 * ms, 60 * ms, 80 * ms}, done: 90 * ms},
			timing{latency: 90 * ms, ttft: 50 * ms, tpot: 20 * ms, hasTTFT: true, hasTPOT: true, itl: []time.Duration{10 * ms, 20 * ms}}},
		{"one token has no TPOT",
			sample{chunks: []time.Duration{30 * ms}, done: 31 * ms},
			timing{latency: 31 * ms, ttft: 30 * ms, hasTTFT: true}},
		{"no text has no TTFT",
			sample{done: 5 * ms, usage: &usage{CompletionTokens: 0}},
			timing{latency: 5 * ms}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, measure(&tt.s))
		})
	}
}

func TestSummarizeSamples(t *testing.T) {
	samples := []sample{
		{chunks: []time.Duration{100 * ms, 110 * ms, 120 * ms}, done: 120 * ms, usage: &usage{PromptTokens: 8, CompletionTokens: 3}},
		{chunks: []time.Duration{200 * ms, 240 * ms}, done: 240 * ms, promptTokens: 6},
		{err: errors.New("HTTP 500: boom"), done: 5 * ms},
		{err: errors.New("HTTP 400: bad"), done: 5 * ms},
		{err: errors.New("HTTP 500: boom"), done: 5 * ms},
		{err: errors.New("context canceled"), canceled: true},
	}
	r := summarize(samples, 2*time.Second)
	assert.Equal(t, 6, r.Sent)
	assert.Equal(t, 2, r.Completed)
	assert.Equal(t, 3, r.Failed)
	assert.Equal(t, 1, r.Canceled)
	assert.Equal(t, "HTTP 500: boom", r.FirstError)
	assert.Equal(t, map[string]int{"HTTP 500: boom": 2, "HTTP 400: bad": 1}, r.Errors)
	assert.Equal(t, 14, r.InputTokens)
	assert.Equal(t, 5, r.OutputTokens)
	assert.InDelta(t, 1.0, r.RequestRate, 1e-9)
	assert.InDelta(t, 2.5, r.OutputTokenRate, 1e-9)
	assert.InDelta(t, 9.5, r.TotalTokenRate, 1e-9)
	assert.Equal(t, Stats{Count: 2, Min: 100, Mean: 150, P50: 150, P90: 190, P99: 199, Max: 200}, roundStats(r.TTFT))
	assert.Equal(t, Stats{Count: 2, Min: 10, Mean: 25, P50: 25, P90: 37, P99: 39.7, Max: 40}, roundStats(r.TPOT))
	assert.Equal(t, Stats{Count: 3, Min: 10, Mean: 20, P50: 10, P90: 34, P99: 39.4, Max: 40}, roundStats(r.ITL))
	assert.Equal(t, Stats{Count: 2, Min: 120, Mean: 180, P50: 180, P90: 228, P99: 238.8, Max: 240}, roundStats(r.Latency))
}

// TestSummarizeBoundsErrors: distinct messages past maxErrorKinds are
// counted together.
func TestSummarizeBoundsErrors(t *testing.T) {
	var samples []sample
	for i := range maxErrorKinds + 5 {
		samples = append(samples, sample{err: fmt.Errorf("request %d failed", i)})
	}
	r := summarize(samples, time.Second)
	assert.Len(t, r.Errors, maxErrorKinds+1)
	assert.Equal(t, 5, r.Errors[otherErrors])
	assert.Equal(t, "request 0 failed", r.FirstError)
}

func TestReportWrite(t *testing.T) {
	r := summarize([]sample{
		{chunks: []time.Duration{100 * ms, 110 * ms}, done: 110 * ms},
		{err: errors.New("HTTP 500: boom")},
	}, time.Second)
	r.URL, r.Model, r.Requests = "http://x/v1/completions", "m", 2
	var text bytes.Buffer
	require.NoError(t, r.WriteText(&text))
	for _, want := range []string{
		"endpoint:        http://x/v1/completions\n",
		"requests:        1 completed, 1 failed (2 sent of 2)\n",
		"output tokens:   2 (2.0 tok/s)\n",
		"TTFT            1    100.00    100.00    100.00    100.00    100.00    100.00\n",
		"first error (1 distinct): HTTP 500: boom\n",
	} {
		assert.Contains(t, text.String(), want)
	}
	var js bytes.Buffer
	require.NoError(t, r.WriteJSON(&js))
	var back Report
	require.NoError(t, json.Unmarshal(js.Bytes(), &back))
	assert.Equal(t, *r, back)
	assert.Contains(t, js.String(), `"p99_ms": 100`)
}
