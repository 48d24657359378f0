package ir

import (
	"fmt"
	"strconv"
)

// Symbol is a runtime extent: a named integer known only when the program
// runs (a decode step's position past), within the closed range [Lo, Hi]
// fixed at compile time. Its value is fed as the integer scalar input of
// the same name, and ops whose offset may vary (slice_update's write
// position, attention's first query) take that input as their runtime
// position operand. Buffers are planned for the range's top, work is done
// for the value.
type Symbol struct {
	Name   string
	Lo, Hi int64
}

// String is "NAME in [LO, HI]".
func (s Symbol) String() string {
	return fmt.Sprintf("%s in [%d, %d]", s.Name, s.Lo, s.Hi)
}

// Range is the symbol's range as input ranges state it.
func (s Symbol) Range() Range {
	return Range{Lo: float64(s.Lo), Hi: float64(s.Hi), Meaning: MeaningSymbol}
}

// Buckets are the geometric buckets of the symbol's range, the extents
// the cost model prices a program at and reports show: powers of two
// between the range's ends, the ends included. A range of one value is
// one bucket.
func (s Symbol) Buckets() []int64 {
	out := []int64{s.Lo}
	for b := int64(1); b < s.Hi; b *= 2 {
		if b > s.Lo {
			out = append(out, b)
		}
	}
	if s.Hi > s.Lo {
		out = append(out, s.Hi)
	}
	return out
}

// Symbol returns the symbol named name.
func (g *Graph) Symbol(name string) (Symbol, bool) {
	for _, s := range g.Symbols {
		if s.Name == name {
			return s, true
		}
	}
	return Symbol{}, false
}

// SymbolInput returns the input that carries symbol name's value.
func (g *Graph) SymbolInput(name string) (Value, bool) {
	for _, v := range g.Inputs() {
		if g.Nodes[v].Name == name {
			return v, true
		}
	}
	return NoValue, false
}

// checkSymbols checks that each symbol is named once, has a range that is
// not empty, and is carried by an integer scalar input whose dtype holds
// the whole range.
func (g *Graph) checkSymbols() error {
	seen := map[string]bool{}
	for _, s := range g.Symbols {
		if s.Name == "" {
			return fmt.Errorf("graph %s: a symbol without a name", g.Name)
		}
		if seen[s.Name] {
			return fmt.Errorf("graph %s: two symbols named %q", g.Name, s.Name)
		}
		seen[s.Name] = true
		if s.Lo < 0 || s.Lo > s.Hi {
			return fmt.Errorf("graph %s: symbol %s: the range must satisfy 0 <= LO <= HI", g.Name, s)
		}
		v, ok := g.SymbolInput(s.Name)
		if !ok {
			return fmt.Errorf("graph %s: symbol %s has no input named %s to carry its value", g.Name, s, strconv.Quote(s.Name))
		}
		n := g.Nodes[v]
		if !n.DType.IsInt() || len(n.Shape) != 0 {
			return fmt.Errorf("graph %s: symbol %s is carried by input %q of type %s%v; want an integer scalar", g.Name, s, s.Name, n.DType, n.Shape)
		}
		if s.Hi > n.DType.MaxInt() {
			return fmt.Errorf("graph %s: symbol %s does not fit input %q's dtype %s", g.Name, s, s.Name, n.DType)
		}
	}
	return nil
}

// Symbol declares a runtime extent name in [lo, hi] and returns the i32
// scalar input that carries its value.
func (b *Builder) Symbol(name string, lo, hi int64) Value {
	v := b.Input(name, I32)
	if v < 0 {
		return v
	}
	b.g.Symbols = append(b.g.Symbols, Symbol{Name: name, Lo: lo, Hi: hi})
	return v
}

// SliceUpdateAt writes update into base along axis at offset plus the
// runtime position at (an integer scalar, usually a symbol's input).
func (b *Builder) SliceUpdateAt(base, update Value, axis int, offset int64, at Value) Value {
	return b.Apply(OpSliceUpdate, Attrs{Axis: axis, Offset: offset}, base, update, at)
}

// CausalAttentionAt is causal attention whose first query sits at offset
// plus the runtime position pos: keys past the last query's position are
// not read, so the work follows pos, not k's extent.
func (b *Builder) CausalAttentionAt(q, k, v Value, scale float64, offset int64, pos Value) Value {
	return b.Apply(OpAttention, Attrs{Scale: scale, Causal: true, Offset: offset}, q, k, v, pos)
}
