package cost

import (
	"fmt"
	"testing"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGEMVOneLoadInFlightHeld holds the model to Little's law on
// matrix-vector kernels made to be bad: a decode projection (bf16, one row
// of A, an H200) whose main loop keeps one 16-byte load outstanding per
// lane (512 bytes a warp) is priced at least as slow as its bytes over
// what the resident warps keep in flight draw at the device's latency
// (bytes x latency / (SMs x resident warps x 512)), and above the same
// kernel with eight in flight (4096 bytes a warp). The figures: 4 warps a
// block, 4 columns a block; resident warps are the blocks a
// multiprocessor gets (ceil(blocks / 132)) or its occupancy, the lesser.
func TestGEMVOneLoadInFlightHeld(t *testing.T) {
	d, err := LookupDevice("h200")
	require.NoError(t, err)
	m := NewModel(d, Defaults(d))
	require.Equal(t, 132, d.SMs)
	require.Equal(t, 600e-9, d.latency(), "the held figures take the 600 ns loaded latency")
	for _, c := range []struct {
		name     string
		N, K     ir.Dim
		resident int     // warps a busy multiprocessor holds, one load in flight
		little   float64 // seconds: bytes x latency / (132 x resident x 512 bytes)
	}{
		// 256 blocks: 2 a multiprocessor, 8 warps; 8.4 MB.
		{"k/v projection", 1024, 4096, 8, 8_398_848 * 600e-9 / (132 * 8 * 512)},
		// 1024 blocks: 8 a multiprocessor, 32 warps; 33.6 MB.
		{"q/o projection", 4096, 4096, 32, 33_570_816 * 600e-9 / (132 * 32 * 512)},
		// 1024 blocks of 7 resident (registers and shared memory), 28
		// warps; 117.5 MB.
		{"down projection", 4096, 14336, 28, 117_477_376 * 600e-9 / (132 * 28 * 512)},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := linearBody(t, ir.BF16, 1, c.K, c.N)
			bad := Schedule{BM: 1, BN: 4, Threads: 128, Stages: 1, TM: 1, GEMV: true}
			good := bad
			good.Stages = 8
			xb, err := m.Features(body, bad)
			require.NoError(t, err)
			xg, err := m.Features(body, good)
			require.NoError(t, err)
			assert.Equal(t, 512.0, xb.InFlight, "one 16-byte load a lane")
			assert.Equal(t, 4096.0, xg.InFlight, "eight 16-byte loads a lane")
			assert.Equal(t, c.resident, xb.residentWarps(d))
			assert.InDelta(t, c.little, xb.Bytes*600e-9/(132*float64(c.resident)*512), 1e-9, "the table's figure")
			tb, err := Predict(d, m.Factors, xb)
			require.NoError(t, err)
			tg, err := Predict(d, m.Factors, xg)
			require.NoError(t, err)
			assert.GreaterOrEqual(t, tb, c.little+m.Factors.Launch-1e-12, "one load in flight: %.3g s under Little's law's %.3g s", tb, c.little)
			assert.Greater(t, tb, tg, "one load in flight (%.3g s) not priced above eight (%.3g s)", tb, tg)
			ranked, err := m.Ranked(body)
			require.NoError(t, err)
			require.NotEmpty(t, ranked)
			assert.Less(t, ranked[0].Seconds, tb, "the best schedule (%s) no faster than one load in flight", ranked[0].Schedule)
		})
	}
}

// TestGEMVSchedulesStream: every matrix-vector schedule offered for a
// decode step's projections on an H200 keeps 4 or 8 16-byte loads in
// flight per lane and streams at least 16 KB of weight a block, and the
// best keeps enough bytes in flight that Little's law does not bound it.
func TestGEMVSchedulesStream(t *testing.T) {
	d, err := LookupDevice("h200")
	require.NoError(t, err)
	m := NewModel(d, Defaults(d))
	for _, c := range []struct{ N, K ir.Dim }{{1024, 4096}, {4096, 4096}, {14336, 4096}, {4096, 14336}, {128256, 4096}} {
		body := linearBody(t, ir.BF16, 1, c.K, c.N)
		ranked, err := m.Ranked(body)
		require.NoError(t, err)
		n := 0
		for _, e := range ranked {
			if !e.Schedule.GEMV {
				continue
			}
			n++
			what := fmt.Sprintf("%dx%d %s", c.N, c.K, e.Schedule)
			loads, _, _, ok := GEMVLoop(body, ir.Value(len(body.Nodes)-1), e.Schedule)
			require.True(t, ok, what)
			assert.Contains(t, []int{4, 8}, loads, what)
			assert.Equal(t, float64(32*16*loads), e.Features.InFlight, what)
			assert.GreaterOrEqual(t, e.Schedule.BN*int(c.K)*2, gemvBlockBytes, what)
		}
		require.NotZero(t, n)
		b, err := Explain(d, m.Factors, ranked[0].Features)
		require.NoError(t, err)
		assert.NotEqual(t, "latency", b.Bound(), "%dx%d: the best (%s) is latency-bound", c.N, c.K, ranked[0].Schedule)
	}
}
