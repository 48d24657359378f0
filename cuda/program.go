package cuda

import (
	"fmt"
	"strings"

	"github.com/lumsearch/lumsearch/lower"
)

// PrintProgram prints every launch of a lowered program, the load-time
// preparation first, each with a comment naming what it computes and the
// buffers it reads and writes.
func PrintProgram(prog *lower.Program) ([]*Kernel, error) {
	var out []*Kernel
	for _, l := range append(append([]*lower.Launch(nil), prog.Prep...), prog.Run...) {
		k, err := PrintKernel(l.Name, launchComment(prog, l), l.Body)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", prog.Name, err)
		}
		out = append(out, k)
	}
	return out, nil
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
