package cuda

import (
	"fmt"
	"strings"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
)

// stridedTile is what printStridedTile needs of the tile it loads: the
// variables' prefix x, the shared buffer dst, the tile's first row (a C
// expression), the operand's rows and K, the tile's rows, the block's
// threads and the dtype. pix is the operand's index at some row and K,
// whose batch coordinates (b0, b1, ..., or 0 where the operand
// broadcasts) the loads use.
type stridedTile struct {
	x, dst, rows       string
	rowLimit, tileRows int64
	K                  int64
	threads            int
	dt                 ir.DType
}

// printStridedTile prints the cp.async loads of one tile of an operand
// read through views (cost.StridedOperand): as the direct path, thread t
// copies 16-byte run t % 4 of rows t / 4 + j R, but a run's address is
// the layout's: the buffer's offset and the batch's part once, each row's
// part once before the pipeline, the K offset's once a step. Every run is
// whole and aligned (StridedOperand's conditions), so each is one copy.
func printStridedTile(w, setup *strings.Builder, body *ir.Graph, op cost.StridedLoad, pix index, t stridedTile) {
	x := t.x
	R := t.threads / 4
	n := (t.tileRows + int64(R) - 1) / int64(R)
	l := op.Layout
	r := len(l.Axes)
	base := []string{fmt.Sprintf("%dLL", l.Offset)}
	for d := 0; d < r-2; d++ {
		if e := modesOffset(l.Axes[d], pix[d]); e != "" {
			base = append(base, e)
		}
	}
	fmt.Fprintf(setup, "  const int %[1]sr0 = threadIdx.x / 4, %[1]skc = threadIdx.x %% 4 * 8;\n", x)
	fmt.Fprintf(setup, "  const long long %[1]srows = %[2]dLL - %[3]s < %[4]dLL ? %[2]dLL - %[3]s : %[4]dLL;\n", x, t.rowLimit, t.rows, t.tileRows)
	fmt.Fprintf(setup, "  const %s* const %ssrc = %s + (%s);\n", storageType(t.dt), x, paramName(body, op.Buf), strings.Join(base, " + "))
	// Each of the thread's rows' offsets, once.
	fmt.Fprintf(setup, "  long long %sro[%d];\n", x, n)
	fmt.Fprintf(setup, "  #pragma unroll\n  for (int j = 0; j < %d; j++) {\n", n)
	fmt.Fprintf(setup, "    const long long row = %s + %sr0 + j * %d;\n", t.rows, x, R)
	rowOff := modesOffset(l.Axes[op.RowAxis], "row")
	if rowOff == "" {
		rowOff = "0LL"
	}
	fmt.Fprintf(setup, "    %sro[j] = %s;\n  }\n", x, rowOff)
	kOff := modesOffset(l.Axes[op.KAxis], fmt.Sprintf("(k0 + %skc)", x))
	if kOff == "" {
		kOff = "0LL"
	}
	fmt.Fprintf(w, "      const long long %sko = %s;\n", x, kOff)
	fmt.Fprintf(w, "      #pragma unroll\n      for (int j = 0; j < %d; j++) {\n", n)
	fmt.Fprintf(w, "        const int rr = %sr0 + j * %d;\n", x, R)
	if n*int64(R) > t.tileRows {
		fmt.Fprintf(w, "        if (rr >= %d) break;\n", t.tileRows)
	}
	fmt.Fprintf(w, "        const int sw = %s;\n", tcSwz("rr", x+"kc / 2"))
	fmt.Fprintf(w, "        if (rr < %[1]srows && k0 + %[1]skc < %[2]dLL) lum_cp_async16(&%[3]s[s][rr][sw], %[1]ssrc + %[1]sro[j] + %[1]sko);\n", x, t.K, t.dst)
	fmt.Fprintf(w, "        else for (int w = 0; w < 4; w++) %s[s][rr][sw + w] = 0u;\n", t.dst)
	w.WriteString("      }\n")
}

// modesOffset is the C expression of an axis's offset in its buffer at
// coordinate coord (an expression below the axis's extent): each mode's
// digit times its stride; "" when every stride is 0.
func modesOffset(modes []cost.Mode, coord string) string {
	var terms []string
	inner := int64(1)
	for i := len(modes) - 1; i >= 0; i-- {
		m := modes[i]
		if m.Stride != 0 && m.Size != 1 {
			digit := coord
			if inner != 1 {
				digit = fmt.Sprintf("(%s / %dLL)", digit, inner)
			}
			if i > 0 {
				digit = fmt.Sprintf("(%s %% %dLL)", digit, m.Size)
			}
			terms = append(terms, fmt.Sprintf("%s * %dLL", digit, m.Stride))
		}
		inner *= m.Size
	}
	return strings.Join(terms, " + ")
}
