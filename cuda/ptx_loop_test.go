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
	labels := map[string]int{}
	for _, m := range ptxLabel.FindAllStringSubmatchIndex(entry, -1) {
		labels[entry[m[2]:m[3]]] = m[0]
	}
	type span struct{ lo, hi int }
	var spans []span
	for _, m := range ptxBranch.FindAllStringSubmatchIndex(entry, -1) {
		at, ok := labels[entry[m[4]:m[5]]]
		if !ok || at > m[0] || !strings.Contains(entry[at:m[1]], "mma.sync") {
			continue
		}
		spans = append(spans, span{at, m[1]})
	}
	if len(spans) == 0 && strings.Contains(entry, "mma.sync") {
		// A reduction of one step: the compiler unrolled the loop.
		return []string{entry}
	}
	var out []string
	for i, s := range spans {
		inner := false
		for j, o := range spans {
			if j != i && o.lo <= s.lo && s.hi <= o.hi && (o.lo != s.lo || o.hi != s.hi) {
				inner = true
			}
		}
		if !inner {
			out = append(out, entry[s.lo:s.hi])
		}
	}
	return out
}

// fragmentLoad is a shared-memory load of 32-bit words, the width of an
// mma fragment register (a norm's statistics are f32 loads, ld.shared.f32).
var fragmentLoad = regexp.MustCompile(`ld\.shared(\.v[24])?\.(u32|b32)\b`)
