package cost

import (
	"fmt"
	"math"
)

// Work is arithmetic a kernel does on one instruction class and dtype.
type Work struct {
	Class InstrClass
	DType string
	FLOPs float64
}

// Features are what the model derives from a kernel and its schedule,
// before any device efficiency enters: the memory traffic its tiling
// implies, its arithmetic by instruction class, and how its grid fills the
// device. Calibration fits the device's factors on them.
type Features struct {
	// Bytes is the DRAM traffic: arguments (re-read once per tile that
	// needs them, past what L2 holds), outputs, partials.
	Bytes float64
	// Work lists the arithmetic, recomputation of fused producers
	// included.
	Work []Work
	// Blocks is the grid size, PerSM the blocks resident on one
	// multiprocessor (occupancy) and WarpsPerBlock their size.
	Blocks, PerSM, WarpsPerBlock int
	// Launches counts the kernel launches (1 for a kernel).
	Launches int
	// TileBytes is what the blocks load from L2 into shared memory and
	// registers: every operand tile each block reads, re-reads included
	// (DRAM traffic is Bytes; a small tile re-reads its operands from L2
	// many times, which caps its arithmetic rate).
	TileBytes float64
	// Stages is the operand tiles a warp keeps in flight (a software
	// pipeline's depth; 0 or 1 when it waits for each): latency is hidden
	// by resident warps times stages. An assumption the measurements are
	// to calibrate, like the factors.
	Stages int
	// SharedBytes is what the kernel's warps read from shared memory
	// beyond the tile loads TileBytes counts, where that can bound it (a
	// matrix-vector kernel multiplying every weight by all of A's rows);
	// served at the banks' peak. 0 for kernels whose shared reads hide
	// under their other bounds.
	SharedBytes float64
	// Instructions is the warp instructions the kernel's main loops
	// issue, when the compiler's PTX told (Resources.LoopInstructions; 0
	// otherwise): each multiprocessor's four schedulers issue one a
	// clock, a bound under the arithmetic's (the mma and FMA they
	// include).
	Instructions float64
	// InFlight is the DRAM bytes one warp keeps outstanding in the
	// kernel's main loop: its lanes times the independent loads each
	// issues before the first is consumed times their bytes (a cp.async
	// pipeline's stages of tiles, over the block's warps). With the
	// resident warps and the device's latency it bounds the bandwidth the
	// kernel draws (Little's law). 0 when the form does not say, and the
	// occupancy rule (latencyWarps) stands in.
	InFlight float64
	// Trips is the dependent memory round trips a block makes outside
	// its main loop (a prologue's loads its loop waits for, a reduction
	// between phases, its first load): each round of resident blocks
	// pays them at the device's latency.
	Trips float64
	// Issue is the warp instructions the kernel issues, by pipe: from the
	// compiler's PTX of the main loop when it was compiled
	// (Resources.Loop), else the form's count of its emitted loop.
	Issue IssueMix
}

// Waves is the number of rounds of blocks each multiprocessor works
// through: the busiest one holds ceil(Blocks/SMs) of them, so a last
// partial round costs a whole one. (Blocks resident together on one
// multiprocessor share its throughput, so occupancy hides latency but does
// not shorten a round.)
func (f Features) Waves(d *Device) int {
	return max(1, (f.Blocks+d.SMs-1)/d.SMs)
}

// latencyWarps is the resident warps per multiprocessor past which memory
// and arithmetic latency is hidden; below it a kernel reaches
// proportionally less of the device's rates.
const latencyWarps = 16

// occupancyShare is the fraction of the device's achievable rates that a
// kernel's occupancy lets it reach on d: the warps resident on a busy
// multiprocessor, which a small grid keeps below what fits.
func (f Features) occupancyShare(d *Device) float64 {
	if f.WarpsPerBlock <= 0 {
		return 1
	}
	return math.Min(1, float64(f.residentWarps(d)*max(f.Stages, 1))/latencyWarps)
}

// Factors are a device's efficiency factors: the fractions of its peaks
// kernels achieve, and its launch overhead. The device description gives
// defaults (Defaults); calibration fits them to measurements.
type Factors struct {
	// Memory is the achieved fraction of peak DRAM bandwidth.
	Memory float64 `json:"memory"`
	// Compute is the achieved fraction of each peak, keyed "class/dtype".
	Compute map[string]float64 `json:"compute"`
	// Launch is the overhead of one launch in seconds.
	Launch float64 `json:"launch_seconds"`
}

// computeKey keys Factors.Compute.
func computeKey(class InstrClass, dtype string) string { return string(class) + "/" + dtype }

// Defaults are the factors a device description states.
func Defaults(d *Device) Factors {
	f := Factors{Memory: d.MemoryAchievable, Compute: map[string]float64{}, Launch: d.Launch}
	for _, p := range d.Peaks {
		f.Compute[computeKey(p.Class, p.DType)] = p.Achievable
	}
	return f
}

// Predict is the predicted time of a kernel with features x on device d
// under factors f: memory time and compute time overlap (the larger wins),
// both stretched by the grid's fill of its waves (a grid that leaves
// multiprocessors idle in its last wave runs as if it filled them) and by
// too low an occupancy to hide latency, plus the launch overhead.
func Predict(d *Device, f Factors, x Features) (float64, error) {
	b, err := Explain(d, f, x)
	if err != nil {
		return 0, err
	}
	return b.Seconds(), nil
}

// Bounds are the terms of a prediction, each the time the kernel would
// take were it bound by that alone (its grid's fill and occupancy
// applied): the prediction is the largest plus the launch.
type Bounds struct {
	// DRAM is the bytes at the achievable bandwidth; Latency the bytes
	// the kernel's loads in flight draw by Little's law, with its blocks'
	// serial round trips (0 when the form gives no InFlight).
	DRAM, Latency float64
	// L2 and Shared are the tile loads from L2 and the shared-memory
	// reads at their rates.
	L2, Shared float64
	// Arithmetic is the work at each class's achievable peak; Issue the
	// instructions at the pipes' rates (and the main loop's PTX count).
	Arithmetic, Issue float64
	// Launch is the launch overhead, added to the largest bound.
	Launch float64
}

// Seconds is the predicted time: the largest bound plus the launch.
func (b Bounds) Seconds() float64 {
	return max(b.DRAM, b.Latency, b.L2, b.Shared, b.Arithmetic, b.Issue) + b.Launch
}

// Bound names the largest bound ("dram", "latency", "l2", "shared",
// "arithmetic", "issue"), or "launch" when the launch outweighs them all.
func (b Bounds) Bound() string {
	name, top := "launch", b.Launch
	for _, c := range []struct {
		name string
		t    float64
	}{{"dram", b.DRAM}, {"latency", b.Latency}, {"l2", b.L2}, {"shared", b.Shared}, {"arithmetic", b.Arithmetic}, {"issue", b.Issue}} {
		if c.t > top {
			name, top = c.name, c.t
		}
	}
	return name
}

// Explain is Predict's terms: every bound a kernel with features x meets
// on device d under factors f.
func Explain(d *Device, f Factors, x Features) (Bounds, error) {
	mem := x.Bytes / (d.MemoryBandwidth * f.Memory)
	comp := 0.0
	for _, w := range x.Work {
		if w.FLOPs == 0 {
			continue
		}
		p, ok := d.Peak(w.Class, w.DType)
		if !ok {
			return Bounds{}, fmt.Errorf("predict on %s: no peak for %s %s", d.Name, w.Class, w.DType)
		}
		eff := f.Compute[computeKey(w.Class, w.DType)]
		if eff <= 0 {
			eff = p.Achievable
		}
		comp += w.FLOPs / (p.FLOPS * eff)
	}
	// The pipes' issue rates bound the instructions the kernel issues,
	// integer addressing included.
	issue := issueTime(d, x.Issue)
	if x.Instructions > 0 {
		issue = math.Max(issue, x.Instructions/issueRate(d))
	}
	// L2 serves tile loads at its bandwidth to the multiprocessors, at
	// the same achieved fraction as DRAM (an assumption until
	// measurements fit it apart).
	l2 := x.TileBytes / (d.l2Rate() * f.Memory)
	// Shared memory serves at its banks' peak times the same achieved
	// fraction as DRAM (an assumption until measurements fit it apart; it
	// keeps the fit's memory term one coefficient).
	shared := sharedTime(d, x.SharedBytes) / f.Memory
	fill := 1.0
	if x.Blocks > 0 {
		fill = float64(x.Blocks) / float64(x.Waves(d)*d.SMs)
	}
	b := Bounds{Launch: float64(max(x.Launches, 1)) * f.Launch}
	if x.InFlight <= 0 {
		// The form did not say what it keeps in flight: resident warps
		// times stages against latencyWarps stand in for Little's law.
		stretch := fill * x.occupancyShare(d)
		b.DRAM, b.L2, b.Shared, b.Arithmetic, b.Issue = mem/stretch, l2/stretch, shared/stretch, comp/stretch, issue/stretch
		return b, nil
	}
	// DRAM: at most the achievable bandwidth, and no more than the busy
	// multiprocessors' bytes in flight over the latency draw; the
	// multiprocessors' own rates (L2, shared memory, pipes) scale with
	// how many are busy, and arithmetic with the warps hiding its
	// latency too.
	b.DRAM, b.Latency = mem, x.littleTime(d, fill)
	b.L2, b.Shared, b.Issue = l2/fill, shared/fill, issue/fill
	b.Arithmetic = comp / (fill * x.occupancyShare(d))
	return b, nil
}

// schedulersPerSM is the warp schedulers of a multiprocessor (four on
// every architecture since Volta), each issuing one warp instruction a
// clock.
const schedulersPerSM = 4

// issueRate is the warp instructions d issues a second at its boost
// clock, every scheduler busy.
func issueRate(d *Device) float64 {
	return float64(d.SMs) * schedulersPerSM * d.BoostClockMHz * 1e6
}
