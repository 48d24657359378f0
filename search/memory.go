package search

import (
	"fmt"
	"math"
	"math/bits"
	"strings"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
)

// Memory is what a model's program needs in device memory, in bytes, by
// part, as its graph says before any search: the buffers of its weights,
// inputs, outputs and states (a decode step's KV caches, at their
// capacity), and an estimate of its intermediates' peak. Sums saturate at
// math.MaxInt64 rather than wrap.
type Memory struct {
	// Weights, Inputs, Outputs and States are the bytes of the graph's
	// leaves of each kind and of its outputs. A quantized weight counts
	// its packed codes, scales and zero points, as its checkpoint stores
	// them; its dequantized values take no memory of their own (a
	// kernel decodes them as it loads them).
	Weights, Inputs, Outputs, States int64
	// Activations is the peak of the intermediates when the graph's ops
	// run in order, each value live from the op that makes it to the
	// last op that reads it, views (reshape, permute, expand, slice, pad)
	// and in-place slice updates sharing their source's memory. It is the
	// unfused program's need: the memory plan of a lowered program reuses
	// the same way, and fusion only removes intermediates.
	Activations int64
	// CachePositions is the positions of the KV caches when the states are
	// a corpus decode step's caches (past_key_values.*), else 0.
	CachePositions int64
}

// Total is the sum of the parts.
func (m Memory) Total() int64 {
	return addSat(addSat(addSat(m.Weights, m.Inputs), addSat(m.Outputs, m.States)), m.Activations)
}

// String lists the parts in a fixed order, states only when there are
// any: "weights 14.9 GiB, KV cache at 8192 positions 1 GiB, activations
// about 2 GiB, inputs 32 KiB, outputs 3.9 GiB".
func (m Memory) String() string {
	parts := []string{"weights " + Bytes(m.Weights)}
	if m.States > 0 {
		if m.CachePositions > 0 {
			parts = append(parts, fmt.Sprintf("KV cache at %d positions %s", m.CachePositions, Bytes(m.States)))
		} else {
			parts = append(parts, "states "+Bytes(m.States))
		}
	}
	parts = append(parts, "activations about "+Bytes(m.Activations), "inputs "+Bytes(m.Inputs), "outputs "+Bytes(m.Outputs))
	return strings.Join(parts, ", ")
}

// GraphMemory is what g's program needs in device memory (see Memory). It
// reads only shapes and dtypes, in one pass over the graph, so that a
// graph of any size is measured before anything of its size is made.
func GraphMemory(g *ir.Graph) Memory {
	var m Memory
	n := len(g.Nodes)
	// root[v] is the value whose memory v's is.
	root := make([]int, n)
	size := make([]int64, n)
	for i, nd := range g.Nodes {
		root[i] = i
		size[i] = tensorBytes(nd.Shape, nd.DType)
		switch nd.Op {
		case ir.OpInput:
			m.Inputs = addSat(m.Inputs, size[i])
		case ir.OpWeight:
			m.Weights = addSat(m.Weights, size[i])
		case ir.OpState:
			m.States = addSat(m.States, size[i])
			if strings.HasPrefix(nd.Name, "past_key_values.") && len(nd.Shape) == 4 {
				m.CachePositions = max(m.CachePositions, int64(nd.Shape[2]))
			}
		case ir.OpReshape, ir.OpPermute, ir.OpExpand, ir.OpSlice, ir.OpPad, ir.OpSliceUpdate, ir.OpScatter,
			// A dequantized weight is decoded in the loads of the
			// kernels that read it: its packed leaves are its memory.
			ir.OpDequant:
			if len(nd.Inputs) > 0 {
				root[i] = root[nd.Inputs[0]]
			}
		}
	}
	// Outputs have buffers of their own, and state updates are written
	// into the states' buffers: neither is an intermediate.
	pinned := make([]bool, n)
	for _, o := range g.Outputs {
		m.Outputs = addSat(m.Outputs, size[o.Value])
		pinned[root[o.Value]] = true
	}
	for _, u := range g.Updates {
		pinned[root[u.Value]] = true
	}
	intermediate := func(v int) bool {
		switch g.Nodes[v].Op {
		case ir.OpInput, ir.OpWeight, ir.OpState:
			return false
		}
		return root[v] == v && !pinned[v]
	}
	last := make([]int, n)
	for i := range last {
		last[i] = i
	}
	for i, nd := range g.Nodes {
		for _, in := range nd.Inputs {
			r := root[in]
			last[r] = max(last[r], i)
		}
	}
	freed := make([][]int, n)
	for v := range n {
		if intermediate(v) {
			freed[last[v]] = append(freed[last[v]], v)
		}
	}
	var live int64
	for i := range n {
		if intermediate(i) {
			live = addSat(live, size[i])
		}
		m.Activations = max(m.Activations, live)
		for _, v := range freed[i] {
			live -= size[v]
		}
	}
	return m
}

// CheckMemory refuses a model whose program needs more memory than dev
// has, with the figures: a KindOption error, since a shorter --seq, a
// narrower --dtype, smaller --dim bindings or a larger --target is the
// remedy. A device whose memory is not known (0) accepts every model.
func CheckMemory(m *Model, dev *cost.Device) error {
	if dev == nil || dev.MemoryBytes <= 0 || m == nil || m.Graph == nil {
		return nil
	}
	mem := GraphMemory(m.Graph)
	if mem.Total() <= dev.MemoryBytes {
		return nil
	}
	remedy := "a shorter --seq, a narrower --dtype (bf16 or f16 halve f32's weights), quantized --weights (fp8 halves bf16's, mxfp4, awq and gptq quarter them)"
	if m.imported() {
		remedy = "smaller --dim bindings"
	}
	return optionErrorf("%s needs %s of device memory (%s); the %s has %s: give %s, or a --target with more memory",
		m.Name, Bytes(mem.Total()), mem, dev.Name, Bytes(dev.MemoryBytes), remedy)
}

// Bytes prints a size in binary units with three significant digits:
// "93.1 GiB", "512 MiB", "12 B".
func Bytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	v, u := float64(n), 0
	for v >= 1023.5 && u < len(units)-1 { // from 1023.5 up, the next unit's "1"
		v /= 1024
		u++
	}
	switch {
	case u == 0:
		return fmt.Sprintf("%d B", n)
	case v >= 999.5:
		return fmt.Sprintf("%.0f %s", v, units[u])
	}
	return fmt.Sprintf("%.3g %s", v, units[u])
}

// tensorBytes is the bytes of a tensor, saturating.
func tensorBytes(s ir.Shape, dt ir.DType) int64 {
	n := int64(dt.Size())
	for _, d := range s {
		n = mulSat(n, max(int64(d), 0))
	}
	return n
}

// addSat and mulSat are + and * of non-negative sizes, saturating at
// math.MaxInt64.
func addSat(a, b int64) int64 {
	if s, carry := bits.Add64(uint64(a), uint64(b), 0); carry == 0 && s <= math.MaxInt64 {
		return int64(s)
	}
	return math.MaxInt64
}

func mulSat(a, b int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}
