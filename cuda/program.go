package cuda

import (
	"fmt"
	"strings"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/internal/bug"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
)

// PrintProgram prints the kernels of a lowered program's launches, the
// load-time preparation first: one kernel per launch, in launch order, but
// launches with equal bodies (a model's layers) share one *Kernel, named
// after its first launch, which Source prints once. Each kernel's comment
// names what its first launch computes and the buffers it reads and
// writes. Kernels take their form's default schedule.
func PrintProgram(prog *lower.Program) ([]*Kernel, error) {
	return PrintProgramWith(prog, nil)
}

// Ranker lists a kernel body's schedules, best first: cost.Model.Ranked.
type Ranker func(body *ir.Graph) ([]cost.Estimate, error)

// Alternatives is how many schedules after the chosen one a kernel keeps
// as candidates for measurement.
const Alternatives = 3

// PrintProgramWith prints a program as PrintProgram does, each kernel in
// the best schedule rank lists for its body, keeping the next few as its
// Alternatives; a nil rank prints the defaults.
func PrintProgramWith(prog *lower.Program, rank Ranker) ([]*Kernel, error) {
	var out []*Kernel
	byBody := map[string]*Kernel{}
	for _, l := range append(append([]*lower.Launch(nil), prog.Prep...), prog.Run...) {
		rc, err := RowCountOf(prog, l)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", prog.Name, err)
		}
		key := l.Body.String()
		if rc != nil {
			key += fmt.Sprintf("\nrows present of %d on axis %d (sequences %t), metadata %s %s", rc.Max, rc.Axis, rc.Sequences, rc.Starts, rc.Seqs)
		}
		if k, ok := byBody[key]; ok {
			out = append(out, k)
			continue
		}
		k, err := printRanked(l.Name, launchComment(prog, l), l.Body, rank, rc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", prog.Name, err)
		}
		byBody[key] = k
		out = append(out, k)
	}
	return out, nil
}

// printRanked prints a body in its best ranked schedule. A lowered
// program's kernels are Legal fusions or one-op kernels, which every form
// prints in every schedule the cost model lists (the tests hold the
// printer to that, over every op and dtype and over random legal bodies),
// so a refusal here is a bug, reported as one with the body it broke on.
func printRanked(name, comment string, body *ir.Graph, rank Ranker, rc *RowCount) (*Kernel, error) {
	if rank == nil {
		k, err := PrintKernelRows(name, comment, body, cost.Schedule{}, rc)
		if err != nil {
			return nil, bug.New(body.String(), fmt.Errorf("a lowered kernel does not print in its form's default schedule: %w", err))
		}
		return k, nil
	}
	ranked, err := rank(body)
	if err != nil {
		return nil, bug.New(body.String(), fmt.Errorf("the cost model prices no schedule of lowered kernel %s: %w", name, err))
	}
	best := ranked[0]
	k, err := PrintKernelRows(name, comment+"\nschedule "+best.Schedule.String(), body, best.Schedule, rc)
	if err != nil {
		return nil, bug.New(body.String(), fmt.Errorf("the cost model's best schedule does not print (a printer or cost-model bug): %w", err))
	}
	est := best
	k.Estimate = &est
	k.comment = comment
	k.Alternatives = append([]cost.Estimate(nil), ranked[1:min(len(ranked), 1+Alternatives)]...)
	return k, nil
}

// Distinct lists kernels once each, in first-use order.
func Distinct(kernels []*Kernel) []*Kernel {
	var out []*Kernel
	seen := map[*Kernel]bool{}
	for _, k := range kernels {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

func launchComment(prog *lower.Program, l *lower.Launch) string {
	name := func(ids []int) string {
		var s []string
		for _, id := range ids {
			b := prog.Buffers[id]
			s = append(s, fmt.Sprintf("%s (%s %s%v)", b.Name, b.Kind, b.DType, b.Shape))
		}
		return strings.Join(s, ", ")
	}
	c := fmt.Sprintf("%s: %s", l.Name, l.Form)
	if l.Class != 0 {
		c += fmt.Sprintf(", e-class %d", l.Class)
	}
	return c + "\nreads " + name(l.Args) + "\nwrites " + name(l.Outs)
}

// RowCountOf is the row count a launch's kernel is printed with: nil for
// a launch without lower.Rows, else the step's maximum and the dtypes of
// the buffers it reads T from.
func RowCountOf(prog *lower.Program, l *lower.Launch) (*RowCount, error) {
	if l.Rows == nil {
		return nil, nil
	}
	if len(l.Rows.Args) != 2 {
		return nil, fmt.Errorf("launch %s: %d buffers for the tokens present; want query_start and seqs", l.Name, len(l.Rows.Args))
	}
	var dts [2]ir.DType
	for i, id := range l.Rows.Args {
		if id < 0 || id >= len(prog.Buffers) {
			return nil, fmt.Errorf("launch %s: the tokens present are read from buffer %d of %d", l.Name, id, len(prog.Buffers))
		}
		b := prog.Buffers[id]
		if !b.DType.IsInt() || len(b.Shape) != 1-i {
			return nil, fmt.Errorf("launch %s: the tokens present are read from %s %s%v; want integers, query_start a vector and seqs a scalar", l.Name, b.Name, b.DType, b.Shape)
		}
		dts[i] = b.DType
	}
	return &RowCount{Max: l.Rows.Max, Sequences: l.Rows.Seqs, Axis: l.Rows.Axis, Starts: dts[0], Seqs: dts[1]}, nil
}
