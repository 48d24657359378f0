package search

import (
	"math"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/step"
)

// Floor is what any program of a model must do per run, and the least
// time that takes on a device.
type Floor struct {
	// Bytes is the DRAM traffic a run cannot avoid: the inputs, the
	// weights (of a table read only through gathers, the rows gathered),
	// each state's rows the run reads and writes (a decode step's KV
	// cache: the rows up to its position, and the new row), and the
	// outputs. FLOPs is the matmuls' and attention's arithmetic.
	Bytes, FLOPs float64
	// Hardware is the larger of Bytes at the device's peak bandwidth and
	// FLOPs at its peak tensor (or FMA) throughput, with no derating: no
	// program can beat it. Achievable derates both by the fractions the
	// device description says a streaming kernel and a library matmul
	// reach.
	Hardware, Achievable float64
}

// programFloor is g's floor on device d with its runtime extents at the
// values of at (a symbol missing there at the top of its range).
func programFloor(g *ir.Graph, d *cost.Device, at map[string]int64) Floor {
	if g == nil {
		return Floor{}
	}
	pos := func(v ir.Value) int64 {
		name := g.Node(v).Name
		if x, ok := at[name]; ok {
			return x
		}
		if s, ok := g.Symbol(name); ok {
			return s.Hi
		}
		return 0
	}
	// A serving step's work follows its metadata: it is priced at
	// step.Layout.Priced with the sequences present at their bucket.
	var work *step.Workload
	if l, err := step.LayoutOf(g); err == nil && l != nil {
		seqs := l.MaxSeqs
		if in, ok := g.SymbolInput(step.SeqsSymbol); ok {
			seqs = int(pos(in))
		}
		w := l.Priced(seqs)
		work = &w
	}
	return floorOf(g, d, pos, work)
}

// StepFloor is the floor of a serving step's graph g on device d at
// workload w: the rows of tokens and of sequences w has, not the step's
// maxima, and its cached context.
func StepFloor(g *ir.Graph, d *cost.Device, w step.Workload) Floor {
	pos := func(v ir.Value) int64 {
		if s, ok := g.Symbol(g.Node(v).Name); ok {
			if g.Node(v).Name == step.SeqsSymbol {
				return int64(w.Seqs)
			}
			return s.Hi
		}
		return 0
	}
	return floorOf(g, d, pos, &w)
}

// floorOf is g's floor with its runtime extents at pos and, for a serving
// step, at workload work: a value holding the step's token (sequence)
// rows counts the rows of work's tokens (sequences) alone.
func floorOf(g *ir.Graph, d *cost.Device, pos func(ir.Value) int64, work *step.Workload) Floor {
	var f Floor
	users := readers(g)
	frac := func(ir.Value) float64 { return 1 }
	if l, err := step.LayoutOf(g); err == nil && l != nil && work != nil {
		rows := lower.GraphRows(g, l)
		tokens := math.Min(1, float64(work.Tokens)/float64(l.MaxTokens))
		seqs := math.Min(1, float64(work.Seqs)/float64(l.MaxSeqs))
		frac = func(v ir.Value) float64 {
			switch r := rows[v]; {
			case r.Tokens:
				return tokens
			case r.Seqs:
				return seqs
			}
			return 1
		}
	}
	size := func(n *ir.Node) float64 { return float64(n.Shape.NumElements()) * float64(n.DType.Size()) }
	experts := expertWeights(g, frac)
	for i, n := range g.Nodes {
		switch n.Op {
		case ir.OpInput:
			f.Bytes += size(n) * frac(ir.Value(i))
		case ir.OpWeight:
			share, ok := experts[ir.Value(i)]
			if !ok {
				share = 1
			}
			f.Bytes += weightBytes(g, n, users[i], frac) * share
		case ir.OpExperts:
			// Each row's k experts: its gate-up and down projections.
			x, gu := g.Node(n.Inputs[0]), g.Node(n.Inputs[2])
			H, I2 := float64(x.Shape[1]), float64(gu.Shape[2])
			f.FLOPs += 2 * float64(x.Shape[0]) * frac(n.Inputs[0]) * float64(n.TopK) * (H*I2 + H*I2/2)
		case ir.OpState:
			f.Bytes += stateBytes(g, ir.Value(i), users, pos, work, frac)
		case ir.OpMatMul:
			a := g.Node(n.Inputs[0])
			f.FLOPs += 2 * float64(n.Shape.NumElements()) * float64(a.Shape[len(a.Shape)-1]) * frac(ir.Value(i))
		case ir.OpAttention:
			f.FLOPs += attentionFLOPs(g, n, pos)
		case ir.OpPagedAttention:
			if work != nil {
				// The keys within this layer's own window.
				q := g.Node(n.Inputs[0]).Shape
				keys, _ := work.Within(int(n.Window))
				f.FLOPs += 4 * float64(q[1]) * float64(q[2]) * keys
			}
		}
	}
	for _, o := range g.Outputs {
		f.Bytes += size(g.Node(o.Value)) * frac(o.Value)
	}
	f.Hardware, f.Achievable = floorSeconds(g, d, f.Bytes, f.FLOPs)
	return f
}

// expertWeights is, for each weight of g that an experts op reads as its
// experts' weights (directly, or through the views, casts and concats that
// stack a checkpoint's per-expert tensors, and the dequants that decode a
// quantized one from its packed codes and scales, whose bytes are what a
// run reads), the share of it a run must read: the expected distinct
// experts its rows choose, under uniform routing (cost.ExpectedExperts),
// over all of them. Rows count as frac says (a step's tokens present).
func expertWeights(g *ir.Graph, frac func(ir.Value) float64) map[ir.Value]float64 {
	out := map[ir.Value]float64{}
	var mark func(v ir.Value, share float64)
	mark = func(v ir.Value, share float64) {
		n := g.Node(v)
		switch {
		case n.Op == ir.OpWeight:
			if s, ok := out[v]; !ok || share > s {
				out[v] = share
			}
		case n.Op.Class() == ir.ClassView, n.Op == ir.OpCast, n.Op == ir.OpConcat, n.Op == ir.OpDequant:
			for _, in := range n.Inputs {
				mark(in, share)
			}
		}
	}
	for _, n := range g.Nodes {
		if n.Op != ir.OpExperts {
			continue
		}
		w := g.Node(n.Inputs[1]).Shape
		rows := int64(math.Ceil(float64(w[0]) * frac(n.Inputs[0])))
		share := cost.ExpectedExperts(int64(w[1]), n.TopK, rows) / float64(w[1])
		for _, in := range n.Inputs[2:] {
			mark(in, share)
		}
	}
	return out
}

// readers lists, for each value of g, the values that read it.
func readers(g *ir.Graph) [][]ir.Value {
	users := make([][]ir.Value, len(g.Nodes))
	for i, n := range g.Nodes {
		for _, in := range n.Inputs {
			users[in] = append(users[in], ir.Value(i))
		}
	}
	return users
}

// weightBytes is what a run must read of weight n: the rows its gathers
// along axis 0 pick (an embedding table) when that is all that reads it,
// else the whole weight.
func weightBytes(g *ir.Graph, n *ir.Node, users []ir.Value, frac func(ir.Value) float64) float64 {
	whole := float64(n.Shape.NumElements()) * float64(n.DType.Size())
	if len(users) == 0 || len(n.Shape) == 0 || n.Shape[0] == 0 {
		return whole
	}
	rowBytes := whole / float64(n.Shape[0])
	rows := 0.0
	for _, uv := range users {
		u := g.Node(uv)
		if u.Op != ir.OpGather || u.Axis != 0 || u.Inputs[0] == u.Inputs[1] {
			return whole
		}
		rows += float64(g.Node(u.Inputs[1]).Shape.NumElements()) * frac(u.Inputs[1])
	}
	return math.Min(whole, rows*rowBytes)
}

// stateBytes is what a run must move of state v (a KV cache): the rows
// written into it (the updates of the slice_updates or scatters that
// write it) and
// the rows read of it: a slice of it (a static decode step's positions
// 0..past), or for causal attention at a runtime position the keys up to
// the last query's; a serving step's pool, the rows its scatter writes
// and the cached positions of the priced workload. A state read in any
// other way is read whole.
func stateBytes(g *ir.Graph, v ir.Value, users [][]ir.Value, pos func(ir.Value) int64, work *step.Workload, frac func(ir.Value) float64) float64 {
	n := g.Node(v)
	whole := float64(n.Shape.NumElements()) * float64(n.DType.Size())
	var written, read float64
	var reads func(x ir.Value) bool // adds what readers of x read; false: x is read whole
	reads = func(x ir.Value) bool {
		for _, uv := range users[x] {
			u := g.Node(uv)
			switch {
			case (u.Op == ir.OpSliceUpdate || u.Op == ir.OpScatter) && u.Inputs[0] == x:
				up := g.Node(u.Inputs[1])
				written += float64(up.Shape.NumElements()) * float64(up.DType.Size()) * frac(u.Inputs[1])
				if !reads(uv) {
					return false
				}
			case u.Op == ir.OpSlice:
				read += float64(u.Shape.NumElements()) * float64(u.DType.Size())
			case u.Op == ir.OpPagedAttention && (u.Inputs[3] == x || u.Inputs[4] == x) && work != nil:
				row := whole / float64(n.Shape[0])
				_, cached := work.Within(int(u.Window))
				read += row * cached
			case u.Op == ir.OpAttention && u.Inputs[0] != x:
				q, k := g.Node(u.Inputs[0]).Shape, g.Node(x).Shape
				keys := float64(k[2])
				if p, ok := u.DynamicOffset(); ok && u.Causal {
					keys = math.Min(keys, float64(u.Offset+pos(p))+float64(q[2]))
				}
				read += whole * keys / float64(k[2])
			default:
				return false
			}
		}
		return true
	}
	if !reads(v) {
		return 2 * whole
	}
	return math.Min(read, whole) + written
}

// attentionFLOPs is an attention's arithmetic: q k^T and p v over the keys
// each query row sees (all of them, or up to its causal position).
func attentionFLOPs(g *ir.Graph, n *ir.Node, pos func(ir.Value) int64) float64 {
	q, k := g.Node(n.Inputs[0]).Shape, g.Node(n.Inputs[1]).Shape
	B, H, S, D, T := float64(q[0]), float64(q[1]), q[2], float64(q[3]), float64(k[2])
	keys := T * float64(S)
	if n.Causal {
		first := n.Offset
		if p, ok := n.DynamicOffset(); ok {
			first += pos(p)
		}
		keys = 0
		for i := range int64(S) {
			keys += math.Min(T, float64(first+i+1))
		}
	}
	return 4 * B * H * D * keys
}

// floorSeconds is bytes at d's peak bandwidth or flops at its peak
// throughput for g's matmul dtype, whichever is longer: not derated
// (hardware) and derated by the device's achievable fractions.
func floorSeconds(g *ir.Graph, d *cost.Device, bytes, flops float64) (hardware, achievable float64) {
	hardware = bytes / d.MemoryBandwidth
	achievable = bytes / (d.MemoryBandwidth * math.Max(d.MemoryAchievable, 1e-9))
	dt := "f32"
	for _, n := range g.Nodes {
		if n.Op == ir.OpMatMul || n.Op == ir.OpAttention {
			dt = g.Node(n.Inputs[0]).DType.String()
			break
		}
	}
	class := cost.FMA
	if dt == "f16" || dt == "bf16" {
		class = cost.MMA
	}
	if p, ok := d.Peak(class, dt); ok && p.FLOPS > 0 {
		hardware = math.Max(hardware, flops/p.FLOPS)
		achievable = math.Max(achievable, flops/(p.FLOPS*math.Max(p.Achievable, 1e-9)))
	}
	return hardware, achievable
}

// expectedFloor is g's floor averaged, for a program with runtime
// extents, over the buckets of their ranges, as the cost model prices
// the program (each symbol in turn, the others at their tops).
func expectedFloor(g *ir.Graph, d *cost.Device) Floor {
	if g == nil || len(g.Symbols) == 0 {
		return programFloor(g, d, nil)
	}
	var sum Floor
	n := 0.0
	for _, s := range g.Symbols {
		for _, b := range s.Buckets() {
			f := programFloor(g, d, map[string]int64{s.Name: b})
			sum.Bytes, sum.FLOPs, sum.Hardware, sum.Achievable = sum.Bytes+f.Bytes, sum.FLOPs+f.FLOPs, sum.Hardware+f.Hardware, sum.Achievable+f.Achievable
			n++
		}
	}
	return Floor{Bytes: sum.Bytes / n, FLOPs: sum.FLOPs / n, Hardware: sum.Hardware / n, Achievable: sum.Achievable / n}
}
