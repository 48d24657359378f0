package cuda

import (
	"fmt"
	"strings"

	"github.com/lumsearch/lumsearch/ir"
)

// The matrix-vector kernel's prologue (gemv.go): a norm's row statistics
// over the whole of K, then A's chunks of K in f32 into shared memory,
// both computed by every thread of the block, gemvGroup consecutive K
// values a thread at a time so that the inputs read along K come through
// 16-byte loads (a decode step's activation is 8 KB in bf16: 512 such
// loads, four a thread of a 128-thread block, all issued before the first
// is used). The block computes it once for all of its columns; what it
// still costs is a few round trips to L2 per block (gemvTrips), which the
// block's first weight loads, issued before it, overlap.

// gemvGroup is the K values a prologue thread computes together: 16 bytes
// of a bf16 or f16 row, 32 of an f32 one.
const gemvGroup = 8

// stagedLeafCap bounds the (row, k) positions stagedLeaves walks: past it
// the prologue loads element by element (correct, only slower).
const stagedLeafCap = 1 << 18

// stagedLeaves finds the inputs that root (its last axis K, a multiple of
// gemvGroup) reads at base(row) + k at every (row, k) of its shape, every
// base 16-byte aligned, through elementwise ops, casts, reshapes,
// permutes and expands alone: those the prologue loads 16 bytes at a time
// (gemvStage). Values for which stop holds (the row reductions, read from
// shared memory) are not followed. An input reached through anything else
// (a pad, a concatenation, a gather) or at two offsets is left out.
func stagedLeaves(body *ir.Graph, root ir.Value, stop func(ir.Value) bool) map[ir.Value]bool {
	shape := body.Node(root).Shape
	if len(shape) == 0 {
		return nil
	}
	K := int64(shape[len(shape)-1])
	rows := shape.NumElements() / max(K, 1)
	if K%gemvGroup != 0 || rows*K > stagedLeafCap {
		return nil
	}
	bad := map[ir.Value]bool{}
	base := map[ir.Value]int64{}
	seen := map[ir.Value]int64{}
	ix := make([]int64, len(shape))
	for r := int64(0); r < rows; r++ {
		clear(base)
		for k := int64(0); k < K; k++ {
			clear(seen)
			lin := r*K + k
			for d := len(shape) - 1; d >= 0; d-- {
				ix[d] = lin % int64(shape[d])
				lin /= int64(shape[d])
			}
			walkLeaves(body, root, ix, stop, true, func(leaf ir.Value, off int64, ok bool) {
				n := body.Node(leaf)
				if !ok || (n.DType != ir.F32 && n.DType != ir.F16 && n.DType != ir.BF16) {
					bad[leaf] = true
					return
				}
				if o, twice := seen[leaf]; twice && o != off {
					bad[leaf] = true
				}
				seen[leaf] = off
				if k == 0 {
					base[leaf] = off
					bad[leaf] = bad[leaf] || off*int64(n.DType.Size())%16 != 0
				} else if b, ok := base[leaf]; !ok || off != b+k {
					bad[leaf] = true
				}
			})
		}
	}
	out := map[ir.Value]bool{}
	for leaf := range base {
		if !bad[leaf] {
			out[leaf] = true
		}
	}
	return out
}

// walkLeaves visits the inputs that v's element at ix (numbers) reads,
// with their linear offsets; ok is false for an input reached through an
// op it does not follow.
func walkLeaves(body *ir.Graph, v ir.Value, ix []int64, stop func(ir.Value) bool, ok bool, visit func(leaf ir.Value, off int64, ok bool)) {
	if stop(v) {
		return
	}
	n := body.Node(v)
	switch {
	case n.Op == ir.OpInput:
		visit(v, linearOffset(n.Shape, ix), ok)
		return
	case n.Op == ir.OpConst || n.Op == ir.OpIota:
		return
	case !ok:
	case n.Op == ir.OpCast || n.Op.Class() == ir.ClassUnary || n.Op.Class() == ir.ClassBinary || n.Op.Class() == ir.ClassCompare || n.Op.Class() == ir.ClassSelect:
		for _, in := range n.Inputs {
			walkLeaves(body, in, ix, stop, body.Node(in).Shape.Equal(n.Shape), visit)
		}
		return
	case n.Op == ir.OpReshape:
		in := body.Node(n.Inputs[0]).Shape
		lin := linearOffset(n.Shape, ix)
		inIx := make([]int64, len(in))
		for d := len(in) - 1; d >= 0; d-- {
			inIx[d] = lin % int64(in[d])
			lin /= int64(in[d])
		}
		walkLeaves(body, n.Inputs[0], inIx, stop, true, visit)
		return
	case n.Op == ir.OpPermute && len(n.Attrs.Perm) == len(ix):
		inIx := make([]int64, len(ix))
		for d, p := range n.Attrs.Perm {
			inIx[p] = ix[d]
		}
		walkLeaves(body, n.Inputs[0], inIx, stop, true, visit)
		return
	case n.Op == ir.OpExpand && len(body.Node(n.Inputs[0]).Shape) == len(ix):
		in := body.Node(n.Inputs[0]).Shape
		inIx := make([]int64, len(ix))
		for d := range ix {
			if in[d] != 1 {
				inIx[d] = ix[d]
			}
		}
		walkLeaves(body, n.Inputs[0], inIx, stop, true, visit)
		return
	}
	// Not followed: every input below is read some other way.
	for _, in := range n.Inputs {
		walkLeaves(body, in, make([]int64, len(body.Node(in).Shape)), stop, false, visit)
	}
}

// linearOffset is ix's row-major offset in shape.
func linearOffset(shape ir.Shape, ix []int64) int64 {
	off := int64(0)
	for d := range shape {
		off = off*int64(shape[d]) + ix[d]
	}
	return off
}

// gemvStage serves the staged inputs' elements of one group of
// gemvGroup K values (elementwise.inputAt): the first element's read
// loads the group's 16 bytes (32 for f32) into registers, the others
// unpack them.
type gemvStage struct {
	body   *ir.Graph
	e      *elementwise
	staged map[ir.Value]bool
	regs   map[ir.Value]string
	prefix string
	j      int // the group's element being computed
}

// at is the element of staged input v at ix, the group's j-th.
func (s *gemvStage) at(v ir.Value, ix index) (string, bool) {
	if !s.staged[v] {
		return "", false
	}
	n := s.body.Node(v)
	size := n.DType.Size()
	r, ok := s.regs[v]
	if !ok {
		if s.j != 0 {
			// Not reached at the group's first element: a scalar load.
			return "", false
		}
		r = fmt.Sprintf("%s%d", s.prefix, v)
		off := linear(n.Shape, ix)
		for h := 0; h < gemvGroup*size/16; h++ {
			s.e.emit("const uint4 %s_%d = lum_ld16(%s + (%s) + %d);", r, h, paramName(s.body, v), off, h*16/size)
		}
		s.regs[v] = r
	}
	per := 16 / size
	word := fmt.Sprintf("%s_%d.%s", r, s.j/per, [4]string{"x", "y", "z", "w"}[(s.j%per)*size/4])
	half := s.j % 2
	switch n.DType {
	case ir.BF16:
		if half == 0 {
			return fmt.Sprintf("__uint_as_float(%s << 16)", word), true
		}
		return fmt.Sprintf("__uint_as_float(%s & 0xffff0000u)", word), true
	case ir.F16:
		if half == 0 {
			return fmt.Sprintf("lum_f16_to_f32((lum_f16)(%s & 0xffffu))", word), true
		}
		return fmt.Sprintf("lum_f16_to_f32((lum_f16)(%s >> 16))", word), true
	}
	return fmt.Sprintf("__uint_as_float(%s)", word), true
}

// gemvNorm prints a norm prologue's row statistics for the block's M rows
// of A (rows blockIdx.z M + mm of the reductions' row shape): every
// thread of the block takes groups of gemvGroup K values along each row,
// its warp reduces by shuffles into RedW, and the warps' partials are
// combined in a fixed order into Red, where the chunk's computation
// (reducedAt) finds them. It returns nil without reductions.
func gemvNorm(b *strings.Builder, body *ir.Graph, aShape ir.Shape, M, K int64, threads int) (func(ir.Value, index) (string, bool), error) {
	reds, redIndex, err := prologueReductions(body, aShape, K, "matrix-vector")
	if err != nil || len(reds) == 0 {
		return nil, err
	}
	rowShape := body.Node(body.Node(reds[0]).Inputs[0]).Shape // one row shape, checked
	warps := threads / 32
	fmt.Fprintf(b, "  __shared__ float Red[%d][%d];\n", len(reds), M)
	fmt.Fprintf(b, "  __shared__ float RedW[%d][%d][%d];\n", len(reds), warps, M)
	reducedAt := func(v ir.Value, ix index) (string, bool) {
		ri, ok := redIndex[v]
		if !ok {
			return "", false
		}
		return fmt.Sprintf("Red[%d][(%s) - (long long)blockIdx.z * %dLL]", ri, linear(body.Node(v).Shape, ix), M), true
	}
	group := int64(gemvGroup)
	if K%group != 0 {
		group = 1
	}
	stop := func(v ir.Value) bool { _, ok := redIndex[v]; return ok }
	staged := map[ir.Value]bool{}
	for _, rv := range reds {
		for leaf := range stagedLeaves(body, body.Node(rv).Inputs[0], stop) {
			staged[leaf] = true
		}
	}
	lead := split(rowShape[:len(rowShape)-1], "row")
	// Each row's passes over K: unrolled whole when few, so that every
	// pass's loads can be issued before the first is used, and without a
	// branch (a thread past K reads the row's last group again and adds
	// nothing).
	passes := (K + int64(threads)*group - 1) / (int64(threads) * group)
	fmt.Fprintf(b, "  #pragma unroll\n  for (int mm = 0; mm < %d; mm++) {\n", M)
	fmt.Fprintf(b, "    const long long row = (long long)blockIdx.z * %dLL + mm;\n", M)
	accs := make([]string, len(reds))
	for ri, rv := range reds {
		accs[ri] = fmt.Sprintf("racc%d", ri)
		init := "0.0f"
		if body.Node(rv).Op == ir.OpMaxReduce {
			init = "-INFINITY"
		}
		fmt.Fprintf(b, "    float %s = %s;\n", accs[ri], init)
	}
	fmt.Fprintf(b, "    %s\n    for (int it = 0; it < %d; it++) {\n", unrollPragma(passes), passes)
	fmt.Fprintf(b, "      const int kt = (it * %d + threadIdx.x) * %d;\n", threads, group)
	fmt.Fprintf(b, "      const bool live = kt < %d;\n      const int kb = min(kt, %d);\n", K, K-group)
	e := &elementwise{body: body, temps: map[string]string{}}
	st := &gemvStage{body: body, e: e, staged: staged, regs: map[ir.Value]string{}, prefix: "sr"}
	if group > 1 {
		e.inputAt = st.at
	}
	for j := 0; j < int(group); j++ {
		st.j = j
		ix := append(append(index{}, lead...), fmt.Sprintf("(kb + %d)", j))
		for ri, rv := range reds {
			v, err := e.value(body.Node(rv).Inputs[0], ix, false)
			if err != nil {
				return nil, err
			}
			if body.Node(rv).Op == ir.OpMaxReduce {
				e.emit("%[1]s = (!live || %[1]s != %[1]s || %[1]s > %[2]s) ? %[1]s : %[2]s;", accs[ri], v)
			} else {
				e.emit("%s += live ? %s : 0.0f;", accs[ri], v)
			}
		}
	}
	for _, l := range e.lines {
		b.WriteString("      " + l + "\n")
	}
	b.WriteString("    }\n")
	for ri, rv := range reds {
		if body.Node(rv).Op == ir.OpMaxReduce {
			fmt.Fprintf(b, "    for (int o = 16; o > 0; o >>= 1) { float t = __shfl_xor_sync(0xffffffffu, %[1]s, o); %[1]s = (%[1]s != %[1]s || %[1]s > t) ? %[1]s : t; }\n", accs[ri])
		} else {
			fmt.Fprintf(b, "    for (int o = 16; o > 0; o >>= 1) %[1]s += __shfl_xor_sync(0xffffffffu, %[1]s, o);\n", accs[ri])
		}
		fmt.Fprintf(b, "    if (threadIdx.x %% 32 == 0) RedW[%d][threadIdx.x / 32][mm] = %s;\n", ri, accs[ri])
	}
	b.WriteString("  }\n  __syncthreads();\n")
	// The warps' partials in a fixed order.
	fmt.Fprintf(b, "  if (threadIdx.x < %d) {\n", int64(len(reds))*M)
	fmt.Fprintf(b, "    const int r = threadIdx.x / %d, mm = threadIdx.x %% %d;\n", M, M)
	b.WriteString("    float v = RedW[r][0][mm];\n")
	for ri, rv := range reds {
		if body.Node(rv).Op == ir.OpMaxReduce {
			fmt.Fprintf(b, "    if (r == %d) for (int w = 1; w < %d; w++) { const float t = RedW[r][w][mm]; v = (v != v || v > t) ? v : t; }\n", ri, warps)
		} else {
			fmt.Fprintf(b, "    if (r == %d) for (int w = 1; w < %d; w++) v += RedW[r][w][mm];\n", ri, warps)
		}
	}
	b.WriteString("    Red[r][mm] = v;\n  }\n  __syncthreads();\n")
	return reducedAt, nil
}

// gemvChunk prints the computation of A's chunk of K (from k0, kc values
// of it) into As in f32, groups of gemvGroup K values a thread (scalar
// when K is no multiple of it). The positions past kc are written zeros so
// that no thread reads shared memory left undefined. With slices S > 1
// (a main loop whose lanes each multiply 4S consecutive values of K by a
// 16-byte load), the chunk is S slices, value k in slice k % 4S / 4 at
// position k / 4S * 4 + k % 4: a lane's S float4 reads of As fall on
// consecutive 16 bytes across the warp, on distinct banks. Two slices
// put a group's first four values in the chunk's first half and its last
// four in the second (position kg/2 in each).
func gemvChunk(b *strings.Builder, body *ir.Graph, aValue ir.Value, aIndex func(k string) index, M, K, chunk int64, threads, slices int, reducedAt func(ir.Value, index) (string, bool)) error {
	group := int64(gemvGroup)
	if K%group != 0 || chunk%group != 0 {
		group = 1
	}
	groups := chunk / group
	// Unrolled whole when few passes, without a branch: a thread past the
	// chunk computes its last group again and stores nothing; one past kc
	// computes the chunk's last group and stores zeros.
	passes := (M*groups + int64(threads) - 1) / int64(threads)
	fmt.Fprintf(b, "    %s\n    for (int it = 0; it < %d; it++) {\n", unrollPragma(passes), passes)
	fmt.Fprintf(b, "      const int tt = it * %d + threadIdx.x, t = min(tt, %d);\n", threads, M*groups-1)
	fmt.Fprintf(b, "      const int mm = t / %d, kg = t %% %d * %d;\n", groups, groups, group)
	fmt.Fprintf(b, "      const bool inK = kg < kc;\n")
	fmt.Fprintf(b, "      const long long m = mm, kb = k0 + min(kg, kc - %d);\n", group)
	dst := func(j int) string {
		switch {
		case slices == 2 && j >= 4:
			return fmt.Sprintf("As[mm][%d + kg / 2 + %d]", chunk/2, j-4)
		case slices == 2:
			return fmt.Sprintf("As[mm][kg / 2 + %d]", j)
		case slices > 2:
			k, vec := fmt.Sprintf("(kg + %d)", j), 4*slices
			return fmt.Sprintf("As[mm][%s %% %d / 4 * %d + %s / %d * 4 + %s %% 4]", k, vec, chunk/int64(slices), k, vec, k)
		}
		return fmt.Sprintf("As[mm][kg + %d]", j)
	}
	var stop func(ir.Value) bool = func(ir.Value) bool { return false }
	if reducedAt != nil {
		stop = func(v ir.Value) bool { return rowReduction(body, body.Node(v)) }
	}
	e := &elementwise{body: body, temps: map[string]string{}, reducedAt: reducedAt}
	st := &gemvStage{body: body, e: e, staged: stagedLeaves(body, aValue, stop), regs: map[ir.Value]string{}, prefix: "sa"}
	if group > 1 {
		e.inputAt = st.at
	}
	vals := make([]string, group)
	for j := range vals {
		st.j = j
		v, err := e.value(aValue, aIndex(fmt.Sprintf("(kb + %d)", j)), false)
		if err != nil {
			return err
		}
		vals[j] = "(inK ? " + v + " : 0.0f)"
	}
	for _, l := range e.lines {
		b.WriteString("      " + l + "\n")
	}
	fmt.Fprintf(b, "      if (tt < %d) {\n", M*groups)
	if group == 1 {
		fmt.Fprintf(b, "        %s = %s;\n", dst(0), vals[0])
	} else {
		for h := 0; h < 2; h++ {
			fmt.Fprintf(b, "        lum_st4(&%s, make_float4(%s, %s, %s, %s));\n", dst(4*h), vals[4*h], vals[4*h+1], vals[4*h+2], vals[4*h+3])
		}
	}
	b.WriteString("      }\n    }\n")
	return nil
}

// gemvUnrollPasses is the most passes of a prologue loop unrolled whole.
const gemvUnrollPasses = 16

// unrollPragma unrolls a prologue loop of n passes whole when they are
// few (no loop left in the PTX: the kernel's innermost loop around its
// 16-byte loads stays the main loop, which LoopMix reads), by 4 otherwise.
func unrollPragma(n int64) string {
	if n <= gemvUnrollPasses {
		return "#pragma unroll"
	}
	return "#pragma unroll 4"
}
