package cost

import (
	"testing"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLittlesLawBoundsStreaming checks Predict against Little's law on
// features of a streaming kernel: whatever its bytes in flight, a kernel
// is priced no faster than its busy multiprocessors' bytes in flight over
// the device's latency allow, nor than the achievable bandwidth, and more
// bytes in flight never cost time.
func TestLittlesLawBoundsStreaming(t *testing.T) {
	for _, name := range []string{"h100", "h200", "a100", "l40s"} {
		d, err := LookupDevice(name)
		require.NoError(t, err)
		f := Defaults(d)
		const bytes = 256 << 20
		prev := 0.0
		for _, c := range []struct {
			blocks, perSM, warps int
			loads                float64 // 16-byte loads in flight a lane
		}{
			{4096, 16, 4, 8}, {4096, 16, 4, 4}, {4096, 16, 4, 2}, {4096, 16, 4, 1},
			{4096, 4, 4, 1}, {4096, 1, 4, 1}, {32, 1, 4, 1},
		} {
			x := Features{Bytes: bytes, Blocks: c.blocks, PerSM: c.perSM, WarpsPerBlock: c.warps, Launches: 1, InFlight: 32 * 16 * c.loads}
			got, err := Predict(d, f, x)
			require.NoError(t, err)
			busy := float64(min(c.blocks, d.SMs))
			resident := float64(min(c.perSM, (c.blocks+d.SMs-1)/d.SMs) * c.warps)
			little := bytes * d.latency() / (busy * resident * x.InFlight)
			floor := bytes / (d.MemoryBandwidth * f.Memory)
			assert.GreaterOrEqual(t, got, little+f.Launch-1e-12, "%s %+v: under Little's law", name, c)
			assert.GreaterOrEqual(t, got, floor+f.Launch-1e-12, "%s %+v: over the achievable bandwidth", name, c)
			assert.GreaterOrEqual(t, got, prev, "%s %+v: fewer bytes in flight predicted less time", name, c)
			prev = got
		}
	}
}

// TestLittlesLawFigures pins the law's figures on an H200: one 16-byte
// load in flight a lane over 2048 resident threads keeps 32 KiB per
// multiprocessor in flight, 4.3 MB over the device, which at 600 ns
// draws 7.2 TB/s, above the achievable 4.3 TB/s (so such a grid is
// bandwidth-bound); the same load over one 128-thread block per
// multiprocessor draws 0.45 TB/s, a tenth of it.
func TestLittlesLawFigures(t *testing.T) {
	d, err := LookupDevice("h200")
	require.NoError(t, err)
	f := Defaults(d)
	f.Launch = 0
	const bytes = 1 << 30
	full := Features{Bytes: bytes, Blocks: 132 * 16 * 4, PerSM: 16, WarpsPerBlock: 4, Launches: 1, InFlight: 512}
	one := Features{Bytes: bytes, Blocks: 132, PerSM: 16, WarpsPerBlock: 4, Launches: 1, InFlight: 512}
	tf, err := Predict(d, f, full)
	require.NoError(t, err)
	to, err := Predict(d, f, one)
	require.NoError(t, err)
	assert.InEpsilon(t, bytes/(4.8e12*f.Memory), tf, 1e-9, "a full grid reaches the achievable bandwidth")
	assert.InEpsilon(t, bytes*600e-9/(132*4*512.0), to, 1e-9, "one block a multiprocessor is latency-bound")
	assert.InEpsilon(t, 0.45e12, bytes/to, 0.05)
}

// TestPipeIssueBound checks the pipes' bound: a loop of integer work is
// priced at its instructions over the integer pipe's 64 lanes a clock
// per multiprocessor, whatever its bytes and arithmetic.
func TestPipeIssueBound(t *testing.T) {
	d, err := LookupDevice("h100")
	require.NoError(t, err)
	f := Defaults(d)
	f.Launch = 0
	clocks := float64(d.SMs) * d.BoostClockMHz * 1e6
	for _, c := range []struct {
		name string
		mix  IssueMix
		want float64
	}{
		{"integer-bound", IssueMix{Int: 37e6, FP: 1e6, Load: 1e6}, 37e6 * 32 / (64 * clocks)},
		{"fp-bound", IssueMix{FP: 40e6}, 40e6 * 32 / (128 * clocks)},
		{"load-bound", IssueMix{Load: 10e6, Shared: 10e6}, 20e6 * 32 / (32 * clocks)},
		{"issue-bound", IssueMix{Int: 10e6, FP: 10e6, Other: 30e6}, 50e6 / (4 * clocks)},
	} {
		x := Features{Bytes: 1 << 20, Blocks: 132 * 8, PerSM: 8, WarpsPerBlock: 8, Launches: 1, InFlight: 512, Issue: c.mix}
		got, err := Predict(d, f, x)
		require.NoError(t, err)
		assert.InEpsilon(t, c.want, got, 1e-9, c.name)
	}
	assert.InDelta(t, 37.0, IssueMix{Int: 37e6, FP: 1e6}.IntPerFP(), 1e-9)
}

// TestDeviceLatencyAndPipes checks that every built-in device states its
// latency, L2 bandwidth and pipe rates with sources, and that a user's
// file without them takes the architecture's.
func TestDeviceLatencyAndPipes(t *testing.T) {
	for _, d := range Devices() {
		assert.Positive(t, d.MemoryLatency, d.Name)
		assert.NotEmpty(t, d.LatencySource, d.Name)
		assert.Positive(t, d.L2Bandwidth, d.Name)
		assert.NotEmpty(t, d.L2Source, d.Name)
		require.NotNil(t, d.Issue, d.Name)
		assert.NotEmpty(t, d.Issue.Source, d.Name)
		assert.Greater(t, d.l2Rate(), d.MemoryBandwidth, "%s: L2 serves faster than DRAM", d.Name)
	}
	d, err := LookupDevice("h100")
	require.NoError(t, err)
	d.MemoryLatency, d.L2Bandwidth, d.Issue = 0, 0, nil
	require.NoError(t, d.Validate())
	assert.Equal(t, defaultLatency, d.latency())
	assert.Equal(t, IssueRates{FP32: 128, Int32: 64, LoadStore: 32}, d.issueRates())
	assert.InEpsilon(t, 12.39e12, d.l2Rate(), 0.01)
	d.MemoryLatency = -1
	assert.ErrorContains(t, d.Validate(), "memory_latency_seconds")
}

// TestTwoWarpGEMMRanksBelowLargeTiles is the held check on a GEMM made
// to be bad: 128x64 tiles of two warps and two stages (what prefill's
// projections ran with) re-read their operands from L2 twice as often as
// 128x128 tiles and keep fewer tiles in flight. It is priced no faster
// than its tiles' L2 traffic at L2's rate and its DRAM bytes' Little's
// law allow, and below the large-tile schedules that repair it.
func TestTwoWarpGEMMRanksBelowLargeTiles(t *testing.T) {
	d, err := LookupDevice("h100")
	require.NoError(t, err)
	m := NewModel(d, Defaults(d))
	bad := Schedule{BM: 128, BN: 64, BK: 32, Threads: 64, Stages: 2, Tensor: true, Warp: 64}
	for _, c := range []struct {
		M, K, N ir.Dim
		l2      float64 // seconds: the bad tiles' L2 traffic at L2's rate
	}{
		// 4096^3: 2048 tiles each loading (128+64) x 4096 x 2 bytes.
		{4096, 4096, 4096, 2048 * 192 * 4096 * 2 / (12.39e12 * 0.9)},
		// A prefill's gate projection: 512 tokens, 4096 -> 14336.
		{512, 4096, 14336, 896 * 192 * 4096 * 2 / (12.39e12 * 0.9)},
	} {
		ranked, err := m.Ranked(linearBody(t, ir.BF16, c.M, c.K, c.N))
		require.NoError(t, err)
		var badE, repaired *Estimate
		for i := range ranked {
			e := &ranked[i]
			switch s := e.Schedule; {
			case s == bad:
				badE = e
			case s.Tensor && s.BM == 128 && s.BN >= 128 && repaired == nil:
				repaired = e
			}
		}
		require.NotNil(t, badE, "%dx%dx%d: the two-warp schedule is listed", c.M, c.K, c.N)
		require.NotNil(t, repaired, "%dx%dx%d: a large-tile schedule is listed", c.M, c.K, c.N)
		assert.GreaterOrEqual(t, badE.Seconds, c.l2*0.999, "%dx%dx%d: under its L2 traffic", c.M, c.K, c.N)
		x := badE.Features
		little := x.Bytes * d.latency() / (float64(d.SMs) * x.InFlightPerSM(d))
		assert.GreaterOrEqual(t, badE.Seconds, little, "%dx%dx%d: under Little's law", c.M, c.K, c.N)
		assert.Greater(t, badE.Seconds, repaired.Seconds, "%dx%dx%d: %s (%.1f us) against %s (%.1f us)", c.M, c.K, c.N, bad, badE.Seconds*1e6, repaired.Schedule, repaired.Seconds*1e6)
	}
}
