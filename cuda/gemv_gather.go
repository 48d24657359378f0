package cuda

import (
	"fmt"
	"strings"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
)

// gemvColumns deals a matrix-vector kernel's columns to its blocks by a
// column map (cost's gather.go): block b owns BN/P consecutive positions
// from b BN/P in each of the P parts, its local column lc at position
// b BN/P + lc % (BN/P) in part lc / (BN/P). The plain map is the block's
// BN consecutive columns from n0.
type gemvColumns struct {
	m  cost.ColumnMap
	bn int64
	N  int64
}

// decl declares name as the column of local column lc (a C expression),
// its position clamped to the last whole load of vec columns, so that a
// block past the end reads real columns whose sums it never stores.
func (c gemvColumns) decl(name, lc string, vec int64) string {
	if c.m.Plain() {
		return fmt.Sprintf("const long long %s = min(n0 + (%s), %dLL);", name, lc, c.N-vec)
	}
	q, np := c.bn/c.m.P, c.N/c.m.P
	return fmt.Sprintf("const long long %s_pos = min((long long)blockIdx.x * %d + (%s) %% %d, %dLL), %s = %s_pos / %d * %d + (%s) / %d * %d + %s_pos %% %d;",
		name, q, lc, q, np-vec, name, name, c.m.I, c.m.P*c.m.I, lc, q, c.m.I, name, c.m.I)
}

// local is the local column of column n (a C expression) in this block.
func (c gemvColumns) local(n string) string {
	if c.m.Plain() {
		return fmt.Sprintf("(int)((%s) - n0)", n)
	}
	q, I, P := c.bn/c.m.P, c.m.I, c.m.P
	return fmt.Sprintf("(int)((%s) / %d %% %d * %d + (%s) / %d * %d + (%s) %% %d - (long long)blockIdx.x * %d)", n, I, P, q, n, P*I, I, n, I, q)
}

// printGatheredEpilogue prints the stores of a matrix-vector kernel whose
// epilogue reads the product at other columns than its own, or writes
// through windows: the block's sums are summed over the partials into
// Part[0] first, then each of the block's product elements is carried
// along each output's direct path (cost.DirectPath) to the output element
// it writes, whose epilogue reads the sums it needs from Part[0] (the
// column map put them in this block).
func printGatheredEpilogue(b *strings.Builder, k *Kernel, body *ir.Graph, mm ir.Value, gath *cost.Gathered, g matmulGeom, cols gemvColumns, M, partials, threads int) error {
	BN := int(cols.bn)
	if partials > 1 {
		fmt.Fprintf(b, "  for (int t = threadIdx.x; t < %d; t += %d) {\n", M*BN, threads)
		fmt.Fprintf(b, "    const int i = t / %d, cc = t %% %d;\n", BN, BN)
		b.WriteString("    float sum = Part[0][i][cc];\n")
		fmt.Fprintf(b, "    for (int p = 1; p < %d; p++) sum += Part[p][i][cc];\n", partials)
		b.WriteString("    Part[0][i][cc] = sum;\n  }\n  __syncthreads();\n")
	}
	windows, err := outputWindows(body)
	if err != nil {
		return err
	}
	fmt.Fprintf(b, "  for (int t = threadIdx.x; t < %d; t += %d) {\n", M*BN, threads)
	fmt.Fprintf(b, "    const int i = t / %d, cc = t %% %d;\n", BN, BN)
	if cols.m.Plain() {
		b.WriteString("    const long long n = n0 + cc;\n")
	} else {
		q := cols.bn / cols.m.P
		fmt.Fprintf(b, "    const long long pos = (long long)blockIdx.x * %d + cc %% %d, n = pos / %d * %d + cc / %d * %d + pos %% %d;\n",
			q, q, cols.m.I, cols.m.P*cols.m.I, q, cols.m.I, cols.m.I)
	}
	fmt.Fprintf(b, "    if (n >= %dLL) continue;\n", cols.N)
	b.WriteString("    const long long m = m0 + i;\n")
	if gemvRowsOnM(k, g) {
		fmt.Fprintf(b, "    if (m >= %s) continue;\n", rowLimit(k, int64(M), true))
	}
	mix := make(index, g.r)
	for d := 0; d < g.r-2; d++ {
		mix[d] = "0"
	}
	mix[g.r-2], mix[g.r-1] = "m", "n"
	r := g.r
	for j, o := range body.Outputs {
		on := body.Node(o.Value)
		oix, conds := forwardGathered(body, mm, gath.Paths[j], mix)
		e := &elementwise{body: body, temps: map[string]string{}, reducedAt: func(v ir.Value, ix index) (string, bool) {
			if v != mm {
				return "", false
			}
			return fmt.Sprintf("Part[0][%s][%s]", ix[r-2], cols.local(ix[r-1])), true
		}}
		v, err := e.value(o.Value, oix, false)
		if err != nil {
			return fmt.Errorf("matrix-vector matmul output %d: %w", j, err)
		}
		at := storeIndex(body, on.Shape, oix, windows[j])
		if gd := storeGuard(body, oix, windows[j]); gd != "" {
			conds = append(conds, gd)
		}
		if len(conds) > 0 {
			fmt.Fprintf(b, "    if (%s) {\n", strings.Join(conds, " && "))
		} else {
			b.WriteString("    {\n")
		}
		for _, l := range e.lines {
			b.WriteString("      " + l + "\n")
		}
		fmt.Fprintf(b, "      out%d[%s] = %s;\n    }\n", j, at, store(on.DType, v))
	}
	b.WriteString("  }\n")
	return nil
}

// forwardGathered carries the product's element ix along an output's
// direct path: the output element's index, and the conditions (a slice's
// range) under which the element reaches the output at all.
func forwardGathered(body *ir.Graph, mm ir.Value, path []ir.Value, ix index) (index, []string) {
	var conds []string
	cur := mm
	for _, v := range path {
		n := body.Node(v)
		switch n.Op {
		case ir.OpPermute:
			out := make(index, len(ix))
			for d, p := range n.Attrs.Perm {
				out[d] = ix[p]
			}
			ix = out
		case ir.OpReshape:
			ix = split(n.Shape, linear(body.Node(cur).Shape, ix))
		case ir.OpSlice:
			in := body.Node(cur).Shape
			out := make(index, len(ix))
			for d := range ix {
				start, step, size := n.Attrs.Starts[d], n.Attrs.Steps[d], int64(n.Shape[d])
				switch {
				case start == 0 && step == 1 && size == int64(in[d]):
					out[d] = ix[d]
				case step == 1:
					conds = append(conds, fmt.Sprintf("%s >= %dLL && %s < %dLL", ix[d], start, ix[d], start+size))
					out[d] = fmt.Sprintf("(%s - %dLL)", ix[d], start)
				default:
					conds = append(conds, fmt.Sprintf("%s >= %dLL && (%s - %dLL) %% %dLL == 0 && (%s - %dLL) / %dLL < %dLL", ix[d], start, ix[d], start, step, ix[d], start, step, size))
					out[d] = fmt.Sprintf("((%s - %dLL) / %dLL)", ix[d], start, step)
				}
			}
			ix = out
		}
		cur = v
	}
	return ix, conds
}
