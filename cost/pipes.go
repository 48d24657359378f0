package cost

import "math"

// What a kernel's loads in flight and instruction mix let it reach: the
// device's memory latency turns the bytes a kernel keeps in flight into
// the bandwidth it can draw (Little's law), and each pipe's throughput
// turns the instructions of its inner loop into a time it cannot beat.
// These are the bounds that tell a kernel with one load outstanding per
// thread, or 64-bit index arithmetic per element, from a streaming one
// that moves the same bytes.

// IssueMix is a kernel's warp instructions by the pipe that executes them.
type IssueMix struct {
	// Int is 32-bit integer arithmetic, compares, logic and address
	// computation (64-bit operations count twice, divisions and
	// remainders as the instruction sequences they compile to).
	Int float64
	// FP is floating-point arithmetic (f32, and packed half pairs).
	FP float64
	// Load is global memory instructions: loads, stores, cp.async.
	Load float64
	// Shared is shared-memory instructions: loads, stores, ldmatrix.
	Shared float64
	// Other is everything else that issues: moves, branches, shuffles,
	// barriers, conversions, tensor-core mma.
	Other float64
}

// Total is every warp instruction of the mix.
func (m IssueMix) Total() float64 { return m.Int + m.FP + m.Load + m.Shared + m.Other }

// Scale is the mix of n times as many instructions (a loop's iterations
// over a grid's warps).
func (m IssueMix) Scale(n float64) IssueMix {
	return IssueMix{Int: m.Int * n, FP: m.FP * n, Load: m.Load * n, Shared: m.Shared * n, Other: m.Other * n}
}

// Add is the mix of both.
func (m IssueMix) Add(o IssueMix) IssueMix {
	return IssueMix{Int: m.Int + o.Int, FP: m.FP + o.FP, Load: m.Load + o.Load, Shared: m.Shared + o.Shared, Other: m.Other + o.Other}
}

// IntPerFP is the integer instructions issued per floating-point one, the
// figure that says a loop is bound by its addressing (0 when it issues no
// floating point).
func (m IssueMix) IntPerFP() float64 {
	if m.FP == 0 {
		return 0
	}
	return m.Int / m.FP
}

// defaultLatency is the loaded DRAM latency of a device whose description
// gives none: the built-in Hopper and Ampere figure.
const defaultLatency = 600e-9

// defaultL2PerSMClock is the L2 bytes per multiprocessor and clock of a
// device whose description gives no L2 bandwidth: the A100's 5120 bytes a
// clock (NVIDIA A100 Tensor Core GPU Architecture whitepaper) over its 108
// multiprocessors.
const defaultL2PerSMClock = 5120.0 / 108

// latency is d's loaded DRAM latency in seconds.
func (d *Device) latency() float64 {
	if d.MemoryLatency > 0 {
		return d.MemoryLatency
	}
	return defaultLatency
}

// l2Rate is the bytes a second d's L2 serves to its multiprocessors.
func (d *Device) l2Rate() float64 {
	if d.L2Bandwidth > 0 {
		return d.L2Bandwidth
	}
	return defaultL2PerSMClock * float64(d.SMs) * d.BoostClockMHz * 1e6
}

// issueRates is d's pipe throughputs: its description's, else those the
// CUDA C++ Programming Guide gives every compute capability from 8.0 to
// 9.0 for 32-bit integer work (64 a clock per multiprocessor) and four
// 8-wide load/store partitions, with 128 FP32 lanes (64 on sm_80).
func (d *Device) issueRates() IssueRates {
	if d.Issue != nil {
		return *d.Issue
	}
	fp := 128
	if d.Arch == "sm_80" {
		fp = 64
	}
	return IssueRates{FP32: fp, Int32: 64, LoadStore: 32}
}

// issueTime is the least time the device's pipes take to issue mix over
// the whole device (every multiprocessor busy): each pipe at its rate,
// and every instruction through the four schedulers' one a clock.
func issueTime(d *Device, m IssueMix) float64 {
	if m.Total() == 0 {
		return 0
	}
	r := d.issueRates()
	clocks := float64(d.SMs) * d.BoostClockMHz * 1e6
	pipe := func(warpInstr float64, lanes int) float64 {
		if warpInstr <= 0 {
			return 0
		}
		return warpInstr * 32 / (float64(lanes) * clocks)
	}
	t := m.Total() / (schedulersPerSM * clocks)
	t = math.Max(t, pipe(m.Int, r.Int32))
	t = math.Max(t, pipe(m.FP, r.FP32))
	t = math.Max(t, pipe(m.Load+m.Shared, r.LoadStore))
	return t
}

// residentWarps is the warps of this kernel a busy multiprocessor holds:
// its occupancy, or fewer when the grid is too small to fill it.
func (f Features) residentWarps(d *Device) int {
	resident := max(f.PerSM, 1)
	if f.Blocks > 0 {
		resident = min(resident, (f.Blocks+d.SMs-1)/d.SMs)
	}
	return resident * max(f.WarpsPerBlock, 1)
}

// residentRounds is the rounds of co-resident blocks a multiprocessor
// works through: a block's serial latency (Trips) is paid once a round.
func (f Features) residentRounds(d *Device) int {
	per := max(f.PerSM, 1) * d.SMs
	return max(1, (max(f.Blocks, 1)+per-1)/per)
}

// littleTime is how long the kernel's DRAM traffic takes when each busy
// multiprocessor keeps its resident warps' InFlight bytes outstanding and
// each load returns after the device's latency (Little's law: bandwidth =
// bytes in flight / latency), with fill of the multiprocessors busy on
// average over the waves; plus the serial round trips every round of
// resident blocks makes outside its main loop.
func (f Features) littleTime(d *Device, fill float64) float64 {
	perSM := float64(f.residentWarps(d)) * f.InFlight
	t := f.Bytes * d.latency() / (perSM * float64(d.SMs) * fill)
	return t + float64(f.residentRounds(d))*f.Trips*d.latency()
}

// InFlightPerSM is the DRAM bytes one busy multiprocessor keeps
// outstanding under these features (0 when the form did not say).
func (f Features) InFlightPerSM(d *Device) float64 {
	return float64(f.residentWarps(d)) * f.InFlight
}
