package cost

import "fmt"

// InstrClass is a kind of arithmetic instruction a kernel's work runs on;
// each has its own peak rate per operand dtype.
type InstrClass string

// The instruction classes the model knows.
const (
	// FMA is ordinary fused multiply-add on the CUDA cores, and the
	// elementwise and reduction work of every kernel.
	FMA InstrClass = "fma"
	// MMA is warp-level tensor-core matrix multiply (mma.sync), sm_80 on.
	MMA InstrClass = "mma.sync"
	// WGMMA is Hopper's warp-group tensor-core multiply (sm_90a).
	WGMMA InstrClass = "wgmma"
)

// Peak is a device's peak rate for one instruction class and operand
// dtype, with the fraction of it kernels achieve and where that fraction
// comes from.
type Peak struct {
	Class InstrClass `json:"class"`
	// DType is the operand dtype: f32, tf32, f16, bf16, i8, f8.
	DType string `json:"dtype"`
	// FLOPS is the dense peak in floating-point (or integer) operations
	// per second, a multiply-add counting two.
	FLOPS float64 `json:"flops"`
	// Achievable is the fraction of FLOPS a well-tuned kernel reaches.
	Achievable float64 `json:"achievable"`
	// Source says where FLOPS and Achievable come from.
	Source string `json:"source"`
}

// Device describes one GPU model for the cost model.
type Device struct {
	// Name is the name --target takes ("h100-sxm"); Aliases are others
	// it answers to ("h100").
	Name     string   `json:"name"`
	Aliases  []string `json:"aliases,omitempty"`
	FullName string   `json:"full_name"` // as the driver reports it
	Arch     string   `json:"arch"`      // compute capability, "sm_90"
	// Source says where the structural numbers (multiprocessors, clock,
	// memory, caches, per-SM limits) come from.
	Source string `json:"source,omitempty"`

	SMs           int     `json:"sms"`
	BoostClockMHz float64 `json:"boost_clock_mhz"`

	MemoryBytes     int64   `json:"memory_bytes"`
	MemoryBandwidth float64 `json:"memory_bandwidth"` // peak DRAM bytes per second
	// MemoryAchievable is the fraction of MemoryBandwidth a streaming
	// kernel reaches (reads plus writes), MemorySource where it comes from.
	MemoryAchievable float64 `json:"memory_achievable"`
	MemorySource     string  `json:"memory_source"`
	L2Bytes          int64   `json:"l2_bytes"`

	SharedPerSM       int `json:"shared_per_sm"`    // bytes
	SharedPerBlock    int `json:"shared_per_block"` // bytes, the opt-in maximum
	RegistersPerSM    int `json:"registers_per_sm"` // 32-bit registers
	RegistersPerBlock int `json:"registers_per_block"`
	MaxThreadsPerSM   int `json:"max_threads_per_sm"`
	MaxBlocksPerSM    int `json:"max_blocks_per_sm"`

	// Launch is the overhead of one kernel launch in seconds (back to back
	// launches on one stream), LaunchSource where it comes from.
	Launch       float64 `json:"launch_seconds"`
	LaunchSource string  `json:"launch_source"`
	// GraphLaunch is what one kernel launch costs inside a replayed CUDA
	// graph, in seconds: the gap a kernel node leaves on the device, the
	// host's call being paid once per graph (a serving step replays one;
	// see docs/serving.md). GraphLaunchSource says where it comes from.
	// 0 in a user's file prices a launch in a graph as launch_seconds.
	GraphLaunch       float64 `json:"graph_launch_seconds,omitempty"`
	GraphLaunchSource string  `json:"graph_launch_source,omitempty"`

	Peaks []Peak `json:"peaks"`

	// MemoryLatency is the seconds a DRAM load takes to return while the
	// memory streams (loaded latency, not a pointer chase's idle one).
	// By Little's law a kernel reaches at most the bytes it keeps in
	// flight over this latency (Features.InFlight). LatencySource says
	// where it comes from. 0 in a user's file takes the default of the
	// device's architecture.
	MemoryLatency float64 `json:"memory_latency_seconds,omitempty"`
	LatencySource string  `json:"latency_source,omitempty"`
	// L2Bandwidth is the bytes per second L2 serves to the
	// multiprocessors, L2Source where it comes from; 0 in a user's file
	// takes the default of the architecture per multiprocessor and clock.
	L2Bandwidth float64 `json:"l2_bandwidth,omitempty"`
	L2Source    string  `json:"l2_source,omitempty"`
	// Issue is what each multiprocessor's pipes complete a clock; nil in
	// a user's file takes the architecture's.
	Issue *IssueRates `json:"issue,omitempty"`
}

// IssueRates are a multiprocessor's per-clock throughputs, in thread
// instructions (a warp instruction is 32 of them), of the pipes an inner
// loop's instructions go to.
type IssueRates struct {
	// FP32 is 32-bit floating-point add, multiply and FMA results.
	FP32 int `json:"fp32"`
	// Int32 is 32-bit integer add, compare, logic, shift and
	// multiply-add results.
	Int32 int `json:"int32"`
	// LoadStore is the threads of memory instructions (global, shared,
	// cp.async, ldmatrix) the load/store units take.
	LoadStore int `json:"load_store"`
	// Source says where the rates come from.
	Source string `json:"source"`
}

// LaunchCost is the seconds one kernel launch costs: inside a replayed
// CUDA graph (GraphLaunch, or Launch where the description has none) or
// issued on its own (Launch).
func (d *Device) LaunchCost(inGraph bool) float64 {
	if inGraph && d.GraphLaunch > 0 {
		return d.GraphLaunch
	}
	return d.Launch
}

// Peak returns the device's peak for an instruction class and dtype.
func (d *Device) Peak(class InstrClass, dtype string) (Peak, bool) {
	for _, p := range d.Peaks {
		if p.Class == class && p.DType == dtype {
			return p, true
		}
	}
	return Peak{}, false
}

// Validate checks that a description has what the model needs.
func (d *Device) Validate() error {
	switch {
	case d.Name == "":
		return fmt.Errorf("device without a name")
	case d.SMs <= 0:
		return fmt.Errorf("device %s: sms must be positive", d.Name)
	case d.MemoryBandwidth <= 0 || d.MemoryAchievable <= 0 || d.MemoryAchievable > 1:
		return fmt.Errorf("device %s: memory_bandwidth must be positive and memory_achievable in (0, 1]", d.Name)
	case d.SharedPerSM <= 0 || d.SharedPerBlock <= 0 || d.RegistersPerSM <= 0 || d.RegistersPerBlock <= 0:
		return fmt.Errorf("device %s: shared memory and registers per SM and per block must be positive", d.Name)
	case d.MaxThreadsPerSM <= 0 || d.MaxBlocksPerSM <= 0:
		return fmt.Errorf("device %s: max_threads_per_sm and max_blocks_per_sm must be positive", d.Name)
	case d.Launch <= 0:
		return fmt.Errorf("device %s: launch_seconds must be positive", d.Name)
	}
	switch {
	case d.GraphLaunch < 0 || d.GraphLaunch > d.Launch:
		// A graph launches its kernels with less host work than one by
		// one, never more.
		return fmt.Errorf("device %s: graph_launch_seconds must be in [0, launch_seconds] (0 takes launch_seconds)", d.Name)
	case d.MemoryLatency < 0 || d.MemoryLatency > 1e-4:
		return fmt.Errorf("device %s: memory_latency_seconds must be in [0, 1e-4] (0 takes the architecture's)", d.Name)
	case d.L2Bandwidth < 0:
		return fmt.Errorf("device %s: l2_bandwidth must not be negative (0 takes the architecture's)", d.Name)
	case d.Issue != nil && (d.Issue.FP32 <= 0 || d.Issue.Int32 <= 0 || d.Issue.LoadStore <= 0):
		return fmt.Errorf("device %s: issue rates fp32, int32 and load_store must be positive", d.Name)
	}
	if _, ok := d.Peak(FMA, "f32"); !ok {
		return fmt.Errorf("device %s: no fma f32 peak", d.Name)
	}
	for _, p := range d.Peaks {
		if p.FLOPS <= 0 || p.Achievable <= 0 || p.Achievable > 1 || p.Source == "" {
			return fmt.Errorf("device %s: peak %s %s needs positive flops, achievable in (0, 1] and a source", d.Name, p.Class, p.DType)
		}
	}
	return nil
}
