package cuda

import (
	"fmt"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
)

// RowCount tells a kernel of a serving step's row-wise launch
// (lower.Rows) how it learns the rows present: T is query_start[seqs] (S,
// with Sequences, is seqs), read through two parameters after the body's
// inputs, lum_starts and lum_seqs, of the metadata's dtypes. A kernel
// over Max rows then computes the first T (or S) of them, its grid sized
// for them (Kernel.Rows).
type RowCount struct {
	Max       int64
	Sequences bool
	// Axis is the axis of the body's outputs that holds the rows.
	Axis         int
	Starts, Seqs ir.DType
}

// RowGrid says how a kernel's grid follows the tokens present: along
// Dim, ceil(T*Num/Den) blocks, at least 1 and at most the printed grid's
// (which is sized for Max). A kernel without one launches its printed
// grid whatever T is.
type RowGrid struct {
	Dim      int
	Num, Den int64
}

// Of is the grid of a launch over T tokens.
func (r *RowGrid) Of(grid [3]int, T int64) [3]int {
	if r == nil {
		return grid
	}
	n := (T*r.Num + r.Den - 1) / r.Den
	grid[r.Dim] = int(min(max(n, 1), int64(grid[r.Dim])))
	return grid
}

// rowCountParams are the parameters that carry the tokens present.
func rowCountParams(rc *RowCount) []Param {
	return []Param{
		{Name: "lum_starts", Type: "const " + storageType(rc.Starts) + "*"},
		{Name: "lum_seqs", Type: "const " + storageType(rc.Seqs) + "*"},
	}
}

// line declares lum_t, the rows present, for a kernel that bounds its
// loops by it.
func (rc *RowCount) line() string {
	if rc.Sequences {
		return "  const long long lum_t = (long long)lum_seqs[0];\n"
	}
	return "  const long long lum_t = (long long)lum_starts[(long long)lum_seqs[0]];\n"
}

// rowsOf says whether a kernel of body printed with rc (nil: none) may
// follow the rows present on a loop space of shape space: the body's
// outputs hold the rows on their outermost axis but for axes of 1, and so
// does the space (lower.Leading). It returns the elements a row holds in
// a space of total elements.
func rowsOf(rc *RowCount, body *ir.Graph, space ir.Shape, total int64) (perRow int64, ok bool) {
	if rc == nil || total != space.NumElements() {
		return 0, false
	}
	for _, o := range body.Outputs {
		if s := body.Node(o.Value).Shape; leadingAxis(s) != rc.Axis {
			return 0, false
		}
	}
	return lower.Leading(space, rc.Max)
}

// RowsPresent is lower.Rows.Present for a launch, its buffers read from
// feeds by name.
func RowsPresent(prog *lower.Program, l *lower.Launch, feeds map[string]*ir.Tensor) (int64, error) {
	if l.Rows == nil || len(l.Rows.Args) != 2 {
		return 0, fmt.Errorf("launch %s has no row count", l.Name)
	}
	n, err := l.Rows.Present(feeds[prog.Buffers[l.Rows.Args[0]].Name], feeds[prog.Buffers[l.Rows.Args[1]].Name])
	if err != nil {
		return 0, fmt.Errorf("launch %s: %w", l.Name, err)
	}
	return n, nil
}

// allTokens are the contents of a row count's parameters that say every
// row is present: query_start [0, Max] and seqs 1 (seqs Max for rows of
// sequences, whose kernels read no query_start).
func allTokens(rc *RowCount) ([][]byte, error) {
	S := int64(1)
	if rc.Sequences {
		S = rc.Max
	}
	starts, err := ir.TensorOfInts(rc.Starts, ir.Shape{2}, 0, rc.Max)
	if err != nil {
		return nil, fmt.Errorf("the row count's query_start: %w", err)
	}
	seqs, err := ir.TensorOfInts(rc.Seqs, ir.Shape{}, S)
	if err != nil {
		return nil, fmt.Errorf("the row count's seqs: %w", err)
	}
	return [][]byte{EncodeTensor(starts), EncodeTensor(seqs)}, nil
}
