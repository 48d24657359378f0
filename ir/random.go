package ir

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/lumsearch/lumsearch/internal/mmap"
	"github.com/lumsearch/lumsearch/internal/parallel"
)

// RandomMode chooses the kind of values RandomFeeds draws.
type RandomMode uint8

// The modes.
const (
	// Typical values: floats of order one, positive where an op needs it.
	Typical RandomMode = iota
	// Stress values, for the rule verifier: large logits (|x| up to 60)
	// and values clustered around a large offset so that subtractions
	// nearly cancel.
	Stress
)

// domain is what the ops reading a leaf need of its values.
type domain struct {
	positive bool  // log, sqrt, rsqrt, recip, a divisor, a pow base
	ranged   bool  // drawn from rng: what the leaf means (InputRanges) or a stated range
	rng      Range // when ranged
}

// RandomFeeds draws a seeded tensor for every input, weight and state of g.
// Ranges follow the ops that read each leaf (looking through views): a
// leaf that means something (InputRanges: gather indices, positions,
// masks) is drawn within that meaning's range, and other values stay
// positive where a logarithm, root, reciprocal, divisor or power base
// needs them. No tensor is all zeros unless its range holds only zero.
func RandomFeeds(g *Graph, seed uint64, mode RandomMode) (map[string]*Tensor, error) {
	return RandomLeaves(g, seed, mode, OpInput, OpWeight, OpState)
}

// RandomLeaves is RandomFeeds for the leaves of the given kinds only (for
// example inputs and states, when a model's weights come from elsewhere).
func RandomLeaves(g *Graph, seed uint64, mode RandomMode, kinds ...Op) (map[string]*Tensor, error) {
	return randomLeaves(g, seed, mode, nil, nil, nil, kinds...)
}

// RandomLeavesIn is RandomLeaves with ranges the caller states, by leaf
// name (--input-range): a stated range replaces the one InputRanges
// infers. The ranges are checked first (CheckRanges), so an unknown name
// or an empty range is an error naming it.
func RandomLeavesIn(g *Graph, seed uint64, mode RandomMode, stated map[string]Range, kinds ...Op) (map[string]*Tensor, error) {
	if err := CheckRanges(g, stated); err != nil {
		return nil, err
	}
	return randomLeaves(g, seed, mode, nil, stated, nil, kinds...)
}

// RandomFeedsInto is RandomFeeds with the float32 storage of large float
// leaves (largeLeaf elements or more) taken from take, which returns a
// slice of n elements whose contents are overwritten: memory the caller
// already holds, whose pages are in place, where fresh memory costs a page
// fault per 4 KiB page touched, seconds per gigabyte on a virtual machine.
// A nil take is RandomFeeds.
func RandomFeedsInto(g *Graph, seed uint64, mode RandomMode, take func(n int) []float32) (map[string]*Tensor, error) {
	return randomLeaves(g, seed, mode, take, nil, nil, OpInput, OpWeight, OpState)
}

// LargeLeaves holds large leaves drawn by RandomFeedsShared, so that
// graphs drawn with one seed share the leaves they draw alike: the same
// node, name, type and domain (what its uses say of its values). A
// kernel printed for fewer rows reads its launch's weights as the
// launch's kernel does; drawing gigabytes of them once saves seconds.
type LargeLeaves map[string]*Tensor

// RandomFeedsShared is RandomFeedsInto, each large leaf taken from shared
// when a graph drawn before with the same seed drew it alike, else drawn
// and kept there. The tensors are shared: callers must not modify them.
func RandomFeedsShared(g *Graph, seed uint64, mode RandomMode, take func(n int) []float32, shared LargeLeaves) (map[string]*Tensor, error) {
	return randomLeaves(g, seed, mode, take, nil, shared, OpInput, OpWeight, OpState)
}

func randomLeaves(g *Graph, seed uint64, mode RandomMode, take func(n int) []float32, stated map[string]Range, shared LargeLeaves, kinds ...Op) (map[string]*Tensor, error) {
	doms := leafDomains(g)
	ranges := InputRanges(g)
	for name, r := range stated {
		r.Meaning = MeaningStated
		ranges[name] = r
	}
	for i, n := range g.Nodes {
		if r, ok := ranges[n.Name]; ok && (n.Op == OpInput || n.Op == OpWeight || n.Op == OpState) {
			doms[i].ranged, doms[i].rng = true, r
		}
	}
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	out := map[string]*Tensor{}
	for i, n := range g.Nodes {
		if !slices.Contains(kinds, n.Op) {
			continue
		}
		count := n.Shape.NumElements()
		d := doms[i]
		if d.ranged && d.rng.Meaning == MeaningSlot {
			t, err := TensorOfInts(n.DType, n.Shape, RandomSlots(rng, int(count), int64(d.rng.Hi)+1, true)...)
			if err != nil {
				return nil, fmt.Errorf("random %s %q: %w", n.Op, n.Name, err)
			}
			out[n.Name] = t
			continue
		}
		if count >= largeLeaf {
			key := fmt.Sprintf("%d %d %s %q %s%v %+v %d", seed, i, n.Op, n.Name, n.DType, n.Shape, d, mode)
			if t, ok := shared[key]; ok {
				out[n.Name] = t
				continue
			}
			t, err := drawLarge(n, d, seed, i, mode, take)
			if err != nil {
				return nil, fmt.Errorf("random %s %q: %w", n.Op, n.Name, err)
			}
			if shared != nil {
				shared[key] = t
			}
			out[n.Name] = t
			continue
		}
		vals := make([]float64, count)
		for j := range vals {
			vals[j] = draw(rng, n.DType, d, mode)
		}
		if count > 0 && allZero(vals) {
			vals[0] = firstNonZero(n.DType, d)
		}
		t, err := TensorOf(n.DType, n.Shape, vals...)
		if count == 0 {
			t, err = &Tensor{DType: n.DType, Shape: n.Shape.Clone(), F64: []float64{}}, nil
		}
		if err != nil {
			return nil, fmt.Errorf("random %s %q: %w", n.Op, n.Name, err)
		}
		out[n.Name] = t
	}
	// Paged attention's metadata is valid only as a whole.
	if err := pagedFeeds(g, seed, out, stated); err != nil {
		return nil, err
	}
	// So are an experts node's weights (at most k chosen a row).
	if err := routeFeeds(g, seed, out, stated); err != nil {
		return nil, err
	}
	// And a quantized weight's codes, scales and zero points.
	if err := dequantFeeds(g, seed, out, stated); err != nil {
		return nil, err
	}
	return out, nil
}

// RandomSlots draws n scatter destinations into an axis of extent
// positions (MeaningSlot): distinct positions in [0, extent), with skip
// about one in four of them -1 (a slice not written), and all of them -1
// past the first extent. At least one is a position when n and extent
// are not 0, and with skip at least one is -1 when n is 2 or more, so
// that a check always meets both.
func RandomSlots(rng *rand.Rand, n int, extent int64, skip bool) []int64 {
	out := make([]int64, n)
	taken := map[int64]bool{}
	kept := 0
	for i := range out {
		out[i] = -1
		if int64(len(taken)) >= extent || skip && rng.IntN(4) == 0 && !(i == n-1 && kept == 0) {
			continue
		}
		// Rejection sampling: the slots drawn are few next to the
		// extent in every real use (a step's tokens in a pool).
		at := rng.Int64N(extent)
		for taken[at] {
			at = rng.Int64N(extent)
		}
		taken[at] = true
		out[i] = at
		kept++
	}
	if skip && n >= 2 && kept == n {
		out[rng.IntN(n)] = -1
	}
	return out
}

// largeLeaf is the element count from which a leaf is drawn in chunks
// (drawChunk elements each, every chunk from its own stream, in
// parallel), and a float leaf keeps float32 storage: a real-shape model's
// weights hold billions of elements, which one stream of float64s draws
// in minutes and twice the memory. Smaller leaves come from the graph's
// one stream, so their values do not depend on the large ones.
const (
	largeLeaf = 1 << 20
	drawChunk = 1 << 18
)

// typicalValue makes a large leaf's typical value of one random word: the
// sum of its four 16-bit parts, centred and scaled to unit variance (an
// Irwin-Hall distribution, bell-shaped within ±√12). It is twice as fast as
// a normal draw, which on a model's real-shape weights, billions of
// elements, is seconds of a compile's verification.
func typicalValue(u uint64) float32 {
	const scale = 1.7320508075688772 / 65536 // √3 / 2^16: unit variance
	s := int32(u&0xffff) + int32(u>>16&0xffff) + int32(u>>32&0xffff) + int32(u>>48) - 131070
	return float32(s) * scale
}

// drawLarge draws a large leaf: chunk c of leaf node i comes from a stream
// seeded by (seed, i, c), so the values depend on neither GOMAXPROCS nor
// the order the chunks are drawn in.
func drawLarge(n *Node, d domain, seed uint64, i int, mode RandomMode, take func(n int) []float32) (*Tensor, error) {
	if err := n.Shape.Check(); err != nil {
		return nil, err
	}
	count := n.Shape.NumElements()
	float := n.DType.IsFloat()
	var f32 []float32
	var f64 []float64
	var ints *Tensor // an integer leaf, at its dtype's width
	switch {
	case float && take != nil:
		f32 = take(int(count))
		if len(f32) != int(count) {
			return nil, fmt.Errorf("draw %d elements: given storage for %d", count, len(f32))
		}
	case float:
		f32 = make([]float32, count)
		mmap.AdviseHugeFloat32(f32)
	case n.DType.IsInt():
		ints = NewTensor(n.DType, n.Shape)
	default:
		f64 = make([]float64, count)
		mmap.AdviseHugeFloat64(f64)
	}
	typical := float && mode == Typical && !d.positive && !d.ranged
	parallel.Chunks(int(count), drawChunk, func(c, lo, hi int) {
		rng := rand.New(rand.NewPCG(seed^0x1a26e, uint64(i)<<32|uint64(c)))
		if typical {
			src := rng.Uint64
			if n.DType == F32 {
				for j := lo; j < hi; j++ {
					f32[j] = typicalValue(src())
				}
			} else {
				for j := lo; j < hi; j++ {
					f32[j] = float32(n.DType.Round(float64(typicalValue(src()))))
				}
			}
			return
		}
		for j := lo; j < hi; j++ {
			v := draw(rng, n.DType, d, mode)
			switch {
			case float:
				f32[j] = float32(v)
			case ints != nil:
				ints.Set(int64(j), v)
			default:
				f64[j] = v
			}
		}
	})
	if float {
		if !slices.ContainsFunc(f32, func(x float32) bool { return x != 0 }) {
			f32[0] = float32(firstNonZero(n.DType, d))
		}
		return &Tensor{DType: n.DType, Shape: n.Shape.Clone(), F32: f32}, nil
	}
	if ints != nil {
		for i := range ints.Len() {
			if ints.Int(i) != 0 {
				return ints, nil
			}
		}
		ints.Set(0, firstNonZero(n.DType, d))
		return ints, nil
	}
	if allZero(f64) {
		f64[0] = firstNonZero(n.DType, d)
	}
	return &Tensor{DType: n.DType, Shape: n.Shape.Clone(), F64: f64}, nil
}

// firstNonZero is the value that replaces the first element of a leaf
// drawn all zeros.
// In a range, it is the value nearest zero that is not zero (an
// integer for an integer leaf), or zero for a range that holds nothing
// else.
func firstNonZero(dt DType, d domain) float64 {
	if !d.ranged {
		return dt.Round(1)
	}
	lo, hi := d.rng.Lo, d.rng.Hi
	if !dt.IsFloat() {
		lo, hi = math.Ceil(lo), math.Floor(hi)
	}
	switch {
	case lo > 0:
		return dt.Round(lo)
	case hi < 0:
		return dt.Round(hi)
	case hi > 0:
		return dt.Round(math.Min(1, hi))
	case lo < 0:
		return dt.Round(math.Max(-1, lo))
	}
	return 0
}

func allZero(v []float64) bool {
	for _, x := range v {
		if x != 0 {
			return false
		}
	}
	return true
}

func draw(rng *rand.Rand, dt DType, d domain, mode RandomMode) float64 {
	switch {
	case d.ranged:
		return drawIn(rng, dt, d.rng)
	case dt == Bool:
		return b2f(rng.IntN(2) == 1)
	case dt.IsInt():
		if d.positive {
			return float64(1 + rng.IntN(9))
		}
		return float64(rng.IntN(19) - 9)
	}
	var x float64
	switch mode {
	case Stress:
		switch rng.IntN(3) {
		case 0:
			x = (rng.Float64()*2 - 1) * 60 // large logits
		case 1:
			x = 1000 + rng.NormFloat64()*1e-2 // near-cancellation around an offset
		default:
			x = rng.NormFloat64()
		}
	default:
		x = rng.NormFloat64()
	}
	if d.positive {
		x = 0.25 + math.Abs(x)
	}
	return dt.Round(x)
}

// drawIn draws uniformly from r: a real rounded to the dtype (and kept
// within r) for a float leaf's stated range, else an integer within r.
// A meaning InputRanges infers is always a set of integers, even for a
// float leaf (a float mask is 0 or 1).
func drawIn(rng *rand.Rand, dt DType, r Range) float64 {
	if dt.IsFloat() && r.Meaning == MeaningStated {
		x := dt.Round(r.Lo + rng.Float64()*(r.Hi-r.Lo))
		return math.Min(math.Max(x, r.Lo), r.Hi)
	}
	// Bounds beyond 2^53 are clamped, where float64 still holds every
	// integer, so that the count below cannot overflow.
	lo := math.Max(math.Ceil(r.Lo), -1<<53)
	hi := math.Min(math.Floor(r.Hi), 1<<53)
	if hi <= lo {
		return lo
	}
	return lo + float64(rng.Int64N(int64(hi-lo)+1))
}

// leafDomains finds, for every leaf, whether the ops that read it need
// positive values, following views and data movement (which do not
// change values). What a leaf means (indices, masks, positions) is
// InputRanges's to say.
func leafDomains(g *Graph) []domain {
	users := make([][][2]int, len(g.Nodes)) // (consumer, operand position)
	for i, n := range g.Nodes {
		for k, in := range n.Inputs {
			users[in] = append(users[in], [2]int{i, k})
		}
	}
	doms := make([]domain, len(g.Nodes))
	var visit func(v, leaf int, seen map[int]bool)
	visit = func(v, leaf int, seen map[int]bool) {
		if seen[v] {
			return
		}
		seen[v] = true
		for _, u := range users[v] {
			c := g.Nodes[u[0]]
			switch {
			case c.Op == OpLog || c.Op == OpSqrt || c.Op == OpRsqrt || c.Op == OpRecip:
				doms[leaf].positive = true
			case (c.Op == OpDiv || c.Op == OpMod) && u[1] == 1, c.Op == OpPow && u[1] == 0:
				doms[leaf].positive = true
			case (c.Op == OpMul || c.Op == OpAdd) && constAll(g, g.Nodes[c.Inputs[1-u[1]]], func(x float64) bool { return x > 0 }):
				// A positive scale or offset keeps a positive value
				// positive: a row statistic fed to a norm's rsqrt
				// (rsqrt(sum_sq / n + eps)) is a sum of squares.
				visit(u[0], leaf, seen)
			case c.Op.Class() == ClassView || c.Op == OpConcat || c.Op == OpCast ||
				(c.Op == OpSliceUpdate) || (c.Op == OpGather && u[1] == 0) || (c.Op == OpScatter && u[1] < 2):
				visit(u[0], leaf, seen)
			}
		}
	}
	for i, n := range g.Nodes {
		if n.Op == OpInput || n.Op == OpWeight || n.Op == OpState {
			visit(i, i, map[int]bool{})
		}
	}
	return doms
}
