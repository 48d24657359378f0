package ir

// The text format. One statement per line; `;` starts a comment that runs
// to the end of the line; blank lines are ignored. A file is:
//
//	graph mlp                          ; the name: a bare word or a Go-quoted string
//	%0 = input "x" f32[2,3]            ; leaves carry their dtype and shape inline
//	%1 = weight "w" f32[3,4]
//	%2 = state "kv" f16[1,2,16,8]
//	%3 = const f32[] {0.5}             ; one value (broadcast) or one per element
//	%4 = iota i32[4,5] axis=1
//	%5 = matmul %0, %1 : f32[2,4]      ; operands, attributes, then the result type
//	%6 = reshape %3 to=[1,1] : f32[1,1]
//	%7 = expand %6 to=[2,4] : f32[2,4]
//	%8 = mul %5, %7 : f32[2,4]
//	%9 = slice %8 starts=[0,0] ends=[2,4] steps=[1,2] : f32[2,2]
//	output "y" = %9
//	update %2 = %12                    ; after a run, state %2 holds %12
//	symbol "past" 0..127               ; runtime extent, carried by input "past" (an integer scalar)
//
// A node statement is `%name = op [operands] [attributes] [: type]`, where
// the operands are comma-separated values and each attribute is key=value:
//
//	axis=-1                            iota, sum, reduce_max, concat, gather, softmax, slice_update
//	to=[2,4]                           reshape, expand (the result shape)
//	perm=[1,0]                         permute
//	starts=[..] ends=[..] steps=[..]   slice
//	before=[..] after=[..] value=0     pad
//	dtype=f16                          cast
//	eps=1e-05                          layer_norm, rms_norm
//	scale=0.125 causal offset=3        attention (causal is a flag; offset defaults to 0)
//	offset=5                           slice_update
//
// Every attribute an op uses is required except attention's causal and
// offset, so that a forgotten attribute is an error rather than a silent
// zero. Attributes may come in any order; printing uses the order above.
// Leaves (input, weight, state with a quoted name; const with {data}; iota)
// write their dtype and shape after the op instead of a result type.
//
// The result type after `:` is optional when parsing, so graphs can be
// written by hand without working out every shape, but when given it must
// equal what Infer computes; printing always writes it, so that a reader
// sees each value's type without doing inference in their head.
//
// Values may be named %anything made of letters, digits, '_', '.', '+' and
// '-', each defined once and before use; parsing numbers them in order of
// definition, and printing always writes %0, %1, ... Integers are
// decimal. Floats print exactly: as the integer they are when whole and in
// int64's range, otherwise in the shortest form that reads back to the
// same float64 (strconv's 'g'); inf, -inf and nan are accepted. Names are
// Go-quoted strings, so any name round-trips.
//
// Printing writes only the attributes an op uses (as listed in the op
// table), so Parse(g.String()) equals g for every graph built by the
// Builder; a graph whose nodes carry attributes their op ignores loses them.

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// String is the graph in the text format; see Parse.
func (g *Graph) String() string {
	var b strings.Builder
	writeText(&b, g)
	return b.String()
}

// Format writes g in the text format that Parse reads. It prints whatever
// the graph holds, valid or not, so that a broken graph can be looked at;
// only a valid one is guaranteed to parse back. The error is the writer's.
func Format(w io.Writer, g *Graph) error {
	var b strings.Builder
	writeText(&b, g)
	// One write, so that a failing writer fails once, not per line.
	_, err := io.WriteString(w, b.String())
	return err
}

func writeText(b *strings.Builder, g *Graph) {
	b.WriteString("graph ")
	if g == nil {
		b.WriteString("\"\"\n")
		return
	}
	b.WriteString(formatGraphName(g.Name))
	b.WriteByte('\n')
	for i, n := range g.Nodes {
		fmt.Fprintf(b, "%%%d = ", i)
		if n == nil {
			b.WriteString("<nil>\n")
			continue
		}
		formatTextNode(b, n)
		b.WriteByte('\n')
	}
	for _, o := range g.Outputs {
		fmt.Fprintf(b, "output %s = %%%d\n", strconv.Quote(o.Name), o.Value)
	}
	for _, u := range g.Updates {
		fmt.Fprintf(b, "update %%%d = %%%d\n", u.State, u.Value)
	}
	for _, s := range g.Symbols {
		fmt.Fprintf(b, "symbol %s %d..%d\n", strconv.Quote(s.Name), s.Lo, s.Hi)
	}
}

// formatGraphName writes the name bare when it reads back as one word, so
// that the common case stays uncluttered, and quoted otherwise.
func formatGraphName(name string) string {
	if name == "" {
		return `""`
	}
	for i := 0; i < len(name); i++ {
		if !isTextWordByte(name[i]) {
			return strconv.Quote(name)
		}
	}
	return name
}

func formatTextNode(b *strings.Builder, n *Node) {
	b.WriteString(n.Op.String())
	if !n.Op.Valid() {
		// Nothing more can be said reliably; the line will not parse,
		// which is the point: the graph is broken.
		return
	}
	info := ops[n.Op]
	if info.attrs&aName != 0 {
		b.WriteByte(' ')
		b.WriteString(strconv.Quote(n.Name))
	}
	if info.class == ClassLeaf {
		b.WriteByte(' ')
		b.WriteString(n.Attrs.DType.String())
		b.WriteString(n.To.String())
	}
	if info.attrs&aData != 0 {
		b.WriteString(" {")
		for i, v := range n.Data {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(formatTextFloat(v))
		}
		// Integer constants print as exact decimal integers.
		for i, v := range n.Ints {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(strconv.FormatInt(v, 10))
		}
		b.WriteByte('}')
	}
	for i, in := range n.Inputs {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(b, " %%%d", in)
	}
	a := info.attrs
	if a&aAxis != 0 {
		fmt.Fprintf(b, " axis=%d", n.Axis)
	}
	if a&aShape != 0 {
		b.WriteString(" to=")
		b.WriteString(n.To.String())
	}
	if a&aPerm != 0 {
		b.WriteString(" perm=")
		writeTextInts(b, n.Perm)
	}
	if a&aSlice != 0 {
		b.WriteString(" starts=")
		writeTextInts(b, n.Starts)
		b.WriteString(" ends=")
		writeTextInts(b, n.Ends)
		b.WriteString(" steps=")
		writeTextInts(b, n.Steps)
	}
	if a&aPad != 0 {
		b.WriteString(" before=")
		writeTextInts(b, n.Before)
		b.WriteString(" after=")
		writeTextInts(b, n.After)
		b.WriteString(" value=")
		b.WriteString(formatTextFloat(n.Value))
	}
	if a&aDType != 0 && (n.Op != OpMatMul || n.Attrs.DType != InvalidDType) {
		b.WriteString(" dtype=")
		b.WriteString(n.Attrs.DType.String())
	}
	if a&aEps != 0 {
		b.WriteString(" eps=")
		b.WriteString(formatTextFloat(n.Eps))
	}
	if a&aAttn != 0 {
		b.WriteString(" scale=")
		b.WriteString(formatTextFloat(n.Scale))
		if n.Causal {
			b.WriteString(" causal")
		}
		if n.Offset != 0 {
			fmt.Fprintf(b, " offset=%d", n.Offset)
		}
	}
	if a&aOffset != 0 {
		fmt.Fprintf(b, " offset=%d", n.Offset)
	}
	if a&aPaged != 0 {
		b.WriteString(" scale=")
		b.WriteString(formatTextFloat(n.Scale))
		fmt.Fprintf(b, " block=%d", n.Block)
		if n.Window != 0 {
			fmt.Fprintf(b, " window=%d", n.Window)
		}
	}
	if a&aRoute != 0 {
		fmt.Fprintf(b, " k=%d gating=%s", n.TopK, n.Gating)
	}
	if a&aTopK != 0 {
		fmt.Fprintf(b, " k=%d", n.TopK)
	}
	if a&aMoE != 0 {
		fmt.Fprintf(b, " k=%d gating=%s", n.TopK, n.Gating)
		if n.Limit != 0 {
			b.WriteString(" limit=")
			b.WriteString(formatTextFloat(n.Limit))
		}
	}
	if a&aQuant != 0 {
		fmt.Fprintf(b, " dtype=%s format=%s group=%d", n.Attrs.DType, n.Format, n.Group)
		if n.GroupN != 0 {
			fmt.Fprintf(b, " group_n=%d", n.GroupN)
		}
	}
	if info.class != ClassLeaf {
		b.WriteString(" : ")
		b.WriteString(n.DType.String())
		b.WriteString(n.Shape.String())
	}
}

func writeTextInts[T ~int | ~int64](b *strings.Builder, xs []T) {
	b.WriteByte('[')
	for i, x := range xs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(int64(x), 10))
	}
	b.WriteByte(']')
}

// formatTextFloat prints a decimal that parses back to v exactly, with
// lower-case inf and nan to match the rest of the format. Whole numbers in
// int64's range print as the exact integer, so that integer constants read
// as integers (16777216 and -4611686018427387904, not 1.6777216e+07 and
// the shortest -4.611686018427388e+18); everything else prints in the
// shortest form that reads back the same.
func formatTextFloat(v float64) string {
	switch {
	case math.IsNaN(v):
		return "nan"
	case math.IsInf(v, 1):
		return "inf"
	case math.IsInf(v, -1):
		return "-inf"
	case v == 0 && math.Signbit(v):
		return "-0"
	case v == math.Trunc(v) && v >= math.MinInt64 && v < 1<<63:
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
