package cost

// Simple is the simple estimate: a kernel costs the bytes it moves (its
// arguments and its result, each once) at memory bandwidth plus one launch.
// It ignores arithmetic, tiling re-reads and occupancy, so it ranks fusions
// by the memory traffic and launches they save and nothing else.
type Simple struct {
	// Bandwidth is the memory bandwidth in bytes per second.
	Bandwidth float64
	// Launch is the fixed cost of one kernel launch in seconds.
	Launch float64
	// PrepShare is the fraction of its cost a kernel that depends on
	// weights only is charged per run: it runs once at load time, and the
	// share keeps extraction from preparing more than it needs.
	PrepShare float64
}

// DefaultSimple is an H100 SXM's HBM3 bandwidth and a typical launch, with
// load-time work counted at a thousandth (a model serves far more than a
// thousand runs per load).
var DefaultSimple = Simple{Bandwidth: 3.35e12, Launch: 3e-6, PrepShare: 1e-3}

// Kernel returns the predicted seconds of a kernel reading argBytes and
// writing outBytes.
func (s Simple) Kernel(argBytes, outBytes int64) float64 {
	return float64(argBytes+outBytes)/s.Bandwidth + s.Launch
}

// Prep returns the per-run share of a kernel run once at load time.
func (s Simple) Prep(argBytes, outBytes int64) float64 {
	return s.Kernel(argBytes, outBytes) * s.PrepShare
}
