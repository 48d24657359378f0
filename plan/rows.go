package plan

import (
	"fmt"

	"github.com/lumsearch/lumsearch/cuda"
)

// A serving step's row-wise launches: how a kernel learns the rows
// present, how its grid follows them, and the kernels it runs by bucket
// of rows.

// Rows is a launch's row count: the kernel computes the first T of Max
// token rows, T read as query_start[seqs] from the buffers Args (passed
// after the body's inputs), or with Seqs the first S = seqs of Max
// sequence rows (on axis Axis of the body's outputs); along grid axis
// GridAxis (-1: none) it launches
// ceil(T*Num/Den) blocks (S*Num/Den), at least 1 and at most Grid's.
type Rows struct {
	Max      int64 `json:"max"`
	Seqs     bool  `json:"seqs,omitempty"`
	Axis     int   `json:"axis,omitempty"`
	Args     []int `json:"args"`
	GridAxis int   `json:"grid_axis"`
	Num      int64 `json:"num,omitempty"`
	Den      int64 `json:"den,omitempty"`
	// In gives each body input's axis of rows, -1 for none
	// (lower.Rows.In): what writes the body for fewer rows.
	In []int `json:"in,omitempty"`
}

// Bucket is the kernel a row-wise launch runs when at most Hi rows are
// present, more than the previous bucket's Hi (cuda.RowBucket): printed
// for Hi rows (or more) in the schedule the cost model ranks best at Hi.
type Bucket struct {
	Hi       int64  `json:"hi"`
	Kernel   string `json:"kernel"`
	Schedule string `json:"schedule"`
	Grid     [3]int `json:"grid"`
	Block    [3]int `json:"block"`
	// GridAxis, Num and Den are the kernel's grid rule as in Rows.
	GridAxis int   `json:"grid_axis"`
	Num      int64 `json:"num,omitempty"`
	Den      int64 `json:"den,omitempty"`
	// Predicted is the cost model's time for the launch at Hi rows.
	Predicted float64 `json:"predicted_s"`
}

// GridFor is the grid of launch l's own kernel over T tokens of S
// sequences present.
func (l Launch) GridFor(T, S int64) [3]int {
	if l.Rows == nil || l.Rows.GridAxis < 0 {
		return l.Grid
	}
	if l.Rows.Seqs {
		T = S
	}
	r := cuda.RowGrid{Dim: l.Rows.GridAxis, Num: l.Rows.Num, Den: l.Rows.Den}
	return r.Of(l.Grid, T)
}

// For is the kernel, grid and block launch l runs with T tokens of S
// sequences present: its bucket's (the first whose Hi holds the launch's
// rows), else its own.
func (l Launch) For(T, S int64) (kernel string, grid, block [3]int) {
	if l.Rows != nil {
		n := T
		if l.Rows.Seqs {
			n = S
		}
		for _, b := range l.Buckets {
			if n <= b.Hi {
				grid = b.Grid
				if b.GridAxis >= 0 {
					r := cuda.RowGrid{Dim: b.GridAxis, Num: b.Num, Den: b.Den}
					grid = r.Of(b.Grid, n)
				}
				return b.Kernel, grid, b.Block
			}
		}
	}
	return l.Kernel, l.GridFor(T, S), l.Block
}

// validBuckets checks a row-wise launch's buckets: ascending, within its
// maximum, the last at it, each a launchable kernel.
func validBuckets(l Launch) error {
	prev := int64(0)
	for _, b := range l.Buckets {
		if b.Kernel == "" || b.Hi <= prev || b.Hi > l.Rows.Max {
			return fmt.Errorf("row bucket %q up to %d rows after one up to %d; want ascending buckets within 1..%d, each with a kernel", b.Kernel, b.Hi, prev, l.Rows.Max)
		}
		for d := range 3 {
			if b.Grid[d] < 1 || b.Block[d] < 1 {
				return fmt.Errorf("row bucket %s: grid %v, block %v", b.Kernel, b.Grid, b.Block)
			}
		}
		if t := b.Block[0] * b.Block[1] * b.Block[2]; t > 1024 {
			return fmt.Errorf("row bucket %s: %d threads per block", b.Kernel, t)
		}
		if b.GridAxis < -1 || b.GridAxis > 2 || b.GridAxis >= 0 && (b.Num < 1 || b.Den < 1) {
			return fmt.Errorf("row bucket %s: grid axis %d, ratio %d/%d; want -1..2 and a positive ratio", b.Kernel, b.GridAxis, b.Num, b.Den)
		}
		prev = b.Hi
	}
	if len(l.Buckets) > 0 && prev != l.Rows.Max {
		return fmt.Errorf("row buckets up to %d rows of %d", prev, l.Rows.Max)
	}
	return nil
}
