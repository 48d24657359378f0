package cuda

import (
	"regexp"
	"strings"
)

// mmaLoops returns the loops of a PTX entry that issue mma.sync: for each
// backward branch whose loop body (its target label through the branch)
// holds an mma, that body, innermost loops left inside their outer one.
// A loop nested in another that also holds mma is returned once, as the
// outer: the main loop of a kernel is the outermost loop around its mma.
// An entry whose mma sit in no loop (the compiler unrolled a one-step
// reduction) is its own main loop.
func mmaLoops(entry string) []string {
	loops := ptxLoops(entry, ptxMMA)
	if len(loops) == 0 && ptxMMA.MatchString(entry) {
		// A reduction of one step: the compiler unrolled the loop.
		return []string{entry}
	}
	var out []string
	for i, l := range loops {
		inner := false
		for j, o := range loops {
			inner = inner || j != i && len(o) > len(l) && strings.Contains(o, l)
		}
		if !inner {
			out = append(out, l)
		}
	}
	return out
}

// fragmentLoad is a shared-memory load of 32-bit words, the width of an
// mma fragment register (a norm's statistics are f32 loads, ld.shared.f32).
var fragmentLoad = regexp.MustCompile(`ld\.shared(\.v[24])?\.(u32|b32)\b`)
