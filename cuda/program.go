package cuda

import (
	"fmt"
	"strings"

	"github.com/lumsearch/lumsearch/lower"
)

// PrintProgram prints the kernels of a lowered program's launches, the
// load-time preparation first: one kernel per launch, in launch order, but
// launches with equal bodies (a model's layers) share one *Kernel, named
// after its first launch, which Source prints once. Each kernel's comment
// names what its first launch computes and the buffers it reads and
// writes.
func PrintProgram(prog *lower.Program) ([]*Kernel, error) {
	var out []*Kernel
	byBody := map[string]*Kernel{}
	for _, l := range append(append([]*lower.Launch(nil), prog.Prep...), prog.Run...) {
		key := l.Body.String()
		if k, ok := byBody[key]; ok {
			out = append(out, k)
			continue
		}
		k, err := PrintKernel(l.Name, launchComment(prog, l), l.Body)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", prog.Name, err)
		}
		byBody[key] = k
		out = append(out, k)
	}
	return out, nil
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
