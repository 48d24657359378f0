package cuda

import (
	"fmt"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/internal/bug"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
)

// A serving step's batch changes every step, and the best kernel for a
// launch changes with it: one token wants a matrix-vector kernel streaming
// the weight, eight a few accumulators, hundreds tensor-core tiles. So a
// kernel that follows the rows present keeps a kernel per bucket of rows
// (powers of two up to its maximum), each printed for the bucket's top in
// the schedule the cost model ranks best there; buckets that pick the same
// schedule, or for which a higher bucket's kernel is within ShareTolerance
// of their best, share one kernel (the larger one computes the smaller's rows
// alike), and the launch's own kernel, printed for the maximum, serves the
// top bucket. The host picks by the rows present (Kernel.ForRows).

// ShareTolerance is how much slower, as a fraction, a bucket's kernel
// may be than the best schedule the cost model ranks for a lower bucket
// and still serve that bucket too (priced at its own top, which bounds
// its time over fewer rows): a weight-streaming projection costs about
// the same over 1 row as over 8, and a kernel of its own for each costs
// compile and verification time for no measurable gain.
const ShareTolerance = 0.03

// RowBucket is the kernel a launch runs when at most Hi rows are present
// (and more than the previous bucket's Hi).
type RowBucket struct {
	Hi int64
	// Kernel computes at least Hi rows: a kernel printed for a bucket
	// (Kernel.Body set), or the launch's own for the top buckets.
	Kernel *Kernel
	// Estimate is the cost model's for Kernel's schedule at Hi rows.
	Estimate cost.Estimate
}

// RowBuckets are the tops of the row buckets of a kernel that follows up
// to max rows: the powers of two below max, then max.
func RowBuckets(max int64) []int64 {
	var out []int64
	for b := int64(1); b < max; b *= 2 {
		out = append(out, b)
	}
	return append(out, max)
}

// ForRows is the kernel that runs k's launch with n rows present: the
// first of its buckets that holds n, else k itself.
func (k *Kernel) ForRows(n int64) *Kernel {
	for _, b := range k.Buckets {
		if n <= b.Hi {
			return b.Kernel
		}
	}
	return k
}

// bucketKernels lists the kernels k's buckets print besides k itself, in
// ascending order of their rows.
func (k *Kernel) bucketKernels() []*Kernel {
	var out []*Kernel
	for i, b := range k.Buckets {
		if b.Kernel != k && (i == 0 || k.Buckets[i-1].Kernel != b.Kernel) {
			out = append(out, b.Kernel)
		}
	}
	return out
}

// WithBuckets lists kernels once each in first-use order (Distinct), each
// followed by its buckets' own kernels: every kernel a module holds.
func WithBuckets(kernels []*Kernel) []*Kernel {
	var all []*Kernel
	for _, k := range kernels {
		all = append(append(all, k), k.bucketKernels()...)
	}
	return Distinct(all)
}

// printBuckets gives k, printed for launch l's maximum rows in its best
// ranked schedule, its row buckets: each bucket's body (lower's
// BodyAtRows) ranked by rank, consecutive buckets of one schedule sharing
// the kernel printed for the highest of them, the top ones k. A launch
// whose body cannot be written for fewer rows keeps k for every count.
func printBuckets(k *Kernel, l *lower.Launch, rank Ranker, rc *RowCount) error {
	if rc == nil || rank == nil || k.Estimate == nil || l.Rows == nil || rc.Max < 2 {
		return nil
	}
	if len(l.Rows.In) != len(l.Body.Inputs()) {
		// A launch whose rows are not described (a plan of an older
		// version): not a body that cannot be written for fewer rows,
		// but one nobody said how to.
		return fmt.Errorf("launch %s: the rows of %d of its %d inputs are known; its body cannot be written for fewer rows", l.Name, len(l.Rows.In), len(l.Body.Inputs()))
	}
	tops := RowBuckets(rc.Max)
	// The top's estimate as the buckets' are made, by the cost model
	// alone (Rerank's, with the compiler's figures, is not comparable).
	topEst := *k.Estimate
	if ranked, err := rank(l.Body); err == nil {
		for _, e := range ranked {
			if e.Schedule.String() == k.Schedule.String() {
				topEst = e
				break
			}
		}
	}
	type choice struct {
		body *ir.Graph
		est  cost.Estimate
	}
	choices := make([]choice, len(tops))
	for i, hi := range tops {
		if hi == rc.Max {
			choices[i] = choice{l.Body, topEst}
			break
		}
		body, err := l.BodyAtRows(hi)
		if err != nil {
			return nil // not written for fewer rows: k serves them all
		}
		ranked, err := rank(body)
		if err != nil {
			return bug.New(body.String(), fmt.Errorf("the cost model prices no schedule of kernel %s at %d rows: %w", k.Name, hi, err))
		}
		choices[i] = choice{body, ranked[0]}
	}
	k.Buckets = make([]RowBucket, len(tops))
	top := len(tops) - 1
	// From the top down: a bucket whose schedule is the next one's shares
	// that one's kernel.
	k.Buckets[top] = RowBucket{Hi: rc.Max, Kernel: k, Estimate: topEst}
	for i := top - 1; i >= 0; i-- {
		c, next := choices[i], k.Buckets[i+1]
		if c.est.Schedule.String() == next.Kernel.Schedule.String() {
			k.Buckets[i] = RowBucket{Hi: tops[i], Kernel: next.Kernel, Estimate: c.est}
			continue
		}
		if next.Estimate.Seconds <= c.est.Seconds*(1+ShareTolerance) {
			// The next bucket's kernel at its own top, which bounds
			// its time over fewer rows, is about as fast: a kernel of
			// this bucket's own would cost a compilation and a
			// verification for next to nothing.
			k.Buckets[i] = RowBucket{Hi: tops[i], Kernel: next.Kernel, Estimate: next.Estimate}
			continue
		}
		brc := *rc
		brc.Max = tops[i]
		name := fmt.Sprintf("%s_r%d", k.Name, tops[i])
		bk, err := PrintKernelRows(name, k.comment+"\nschedule "+c.est.Schedule.String()+fmt.Sprintf(" (at most %d rows present)", tops[i]), c.body, c.est.Schedule, &brc)
		if err != nil {
			return bug.New(c.body.String(), fmt.Errorf("the cost model's best schedule at %d rows does not print: %w", tops[i], err))
		}
		est := c.est
		bk.Estimate, bk.Body, bk.comment = &est, c.body, k.comment
		k.Buckets[i] = RowBucket{Hi: tops[i], Kernel: bk, Estimate: c.est}
	}
	return nil
}

// PrintBuckets gives each distinct kernel of a printed program that
// follows the rows present its row buckets (see RowBucket), each bucket's
// schedule the one rank ranks best there. kernels are PrintProgramWith's
// (after Rerank, which prices the maximum's schedules with the compiler's
// figures), in launch order; a kernel printed with a schedule the cost
// model did not choose (no Estimate) keeps serving every count.
func PrintBuckets(prog *lower.Program, kernels []*Kernel, rank Ranker) error {
	launches := append(append([]*lower.Launch(nil), prog.Prep...), prog.Run...)
	if len(launches) != len(kernels) {
		return fmt.Errorf("row buckets of %s: %d kernels for %d launches", prog.Name, len(kernels), len(launches))
	}
	done := map[*Kernel]bool{}
	for i, k := range kernels {
		if done[k] {
			continue
		}
		done[k] = true
		if err := printBuckets(k, launches[i], rank, k.count); err != nil {
			return fmt.Errorf("row buckets of %s: %w", prog.Name, err)
		}
	}
	return nil
}

// DropUnfit gives each row bucket whose own kernel does not fit the
// device as the compiler built it (fits says why: its registers or
// shared memory, which the cost model only guessed when it chose the
// bucket's schedule) the next bucket's kernel instead, and returns the
// kernels dropped. The launch's own kernels were priced with the
// compiler's figures (Rerank) and stay.
func DropUnfit(kernels []*Kernel, fits func(k *Kernel) error) []string {
	var dropped []string
	for _, k := range Distinct(kernels) {
		for i := len(k.Buckets) - 2; i >= 0; i-- {
			bk := k.Buckets[i].Kernel
			if bk == k || bk == k.Buckets[i+1].Kernel {
				continue
			}
			if err := fits(bk); err != nil {
				dropped = append(dropped, fmt.Sprintf("%s (%v)", bk.Name, err))
				for j := i; j >= 0 && k.Buckets[j].Kernel == bk; j-- {
					k.Buckets[j].Kernel, k.Buckets[j].Estimate = k.Buckets[i+1].Kernel, k.Buckets[i+1].Estimate
				}
			}
		}
	}
	return dropped
}
