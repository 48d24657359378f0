package cuda

import (
	"fmt"
	"strings"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
)

// keyLoop is the range of keys a block of an attention kernel loops over,
// as C expressions: [beg, end). Every layout loops from beg in steps of its
// key tile and loads, scores and accumulates only keys below end, so that
// a decode step over a KV cache of capacity T reads the keys up to its
// position, not T: the work follows the runtime position. Within the range
// the mask is still computed elementwise on every score, which is what
// makes the kernel right; the range only drops keys whose probability the
// mask makes exactly zero (cost.KeyBound).
type keyLoop struct {
	beg, end string
}

// printKeyLoop prints at indent the computation of the keys the block's
// query rows first..last (C expressions of valid rows, first <= last) see,
// as cost.AttentionKeyBound reads the body's mask, with the runtime
// position read from its input buffer (device memory, as the graph has
// it): kbeg and kend, every key 0..T-1 when one of the rows sees none.
// Without a bound it prints nothing and the loop covers all T keys.
func printKeyLoop(b *strings.Builder, body *ir.Graph, p cost.AttentionParts, T int64, first, last, indent string) keyLoop {
	kb, ok := cost.AttentionKeyBound(body, p)
	if !ok {
		return keyLoop{beg: "0", end: fmt.Sprintf("%dLL", T)}
	}
	names := map[ir.Value]string{}
	in := indent + "  "
	fmt.Fprintf(b, "%s// The keys the block's rows see, by the mask: [kbeg, kend), or all of\n", indent)
	fmt.Fprintf(b, "%s// them when a row sees none (its softmax spreads over the masked keys).\n", indent)
	fmt.Fprintf(b, "%slong long kbeg = 0, kend = %dLL;\n%s{\n", indent, T, indent)
	for i, v := range kb.Inputs() {
		names[v] = fmt.Sprintf("p%d", i)
		fmt.Fprintf(b, "%sconst long long p%d = (long long)%s[0];\n", in, i, paramName(body, v))
	}
	fmt.Fprintf(b, "%slong long lo = %dLL, hi = 0;\n%sbool seen = true;\n", in, T, in)
	fmt.Fprintf(b, "%sfor (long long i = %s; i <= %s; i++) {\n", in, first, last)
	fmt.Fprintf(b, "%s  long long a = 0, z = %dLL, x;\n", in, T-1)
	for _, c := range kb.Constraints {
		x := affineText(c, names)
		switch c.Key {
		case -1:
			fmt.Fprintf(b, "%s  x = %s;\n%s  if (x < z) z = x;\n", in, x, in)
		case 1:
			fmt.Fprintf(b, "%s  x = %s;\n%s  if (-x > a) a = -x;\n", in, x, in)
		default:
			fmt.Fprintf(b, "%s  x = %s;\n%s  if (x < 0) seen = false;\n", in, x, in)
		}
	}
	fmt.Fprintf(b, "%s  if (a > z) seen = false;\n", in)
	fmt.Fprintf(b, "%s  if (a < lo) lo = a;\n%s  if (z + 1 > hi) hi = z + 1;\n%s}\n", in, in, in)
	fmt.Fprintf(b, "%sif (seen) {\n%s  kbeg = lo;\n%s  kend = hi;\n%s}\n%s}\n", in, in, in, in, indent)
	return keyLoop{beg: "kbeg", end: "kend"}
}

// affineText is the C expression of a constraint's left side less its key
// term, at row i and the inputs named by names.
func affineText(c cost.KeyConstraint, names map[ir.Value]string) string {
	var parts []string
	term := func(coef int64, name string) {
		switch coef {
		case 0:
		case 1:
			parts = append(parts, name)
		case -1:
			parts = append(parts, "-"+name)
		default:
			parts = append(parts, fmt.Sprintf("%dLL * %s", coef, name))
		}
	}
	term(c.Row, "i")
	for _, t := range c.Terms {
		term(t.Coef, names[t.Input])
	}
	if c.Const != 0 || len(parts) == 0 {
		parts = append(parts, fmt.Sprintf("%dLL", c.Const))
	}
	return strings.ReplaceAll(strings.Join(parts, " + "), "+ -", "- ")
}

// lastRow is the C expression of the last query row of a block of bm rows
// from s0, of s rows in all.
func lastRow(bm, s int64) string {
	return fmt.Sprintf("(s0 + %d < %dLL ? s0 + %d : %dLL)", bm-1, s, bm-1, s-1)
}
