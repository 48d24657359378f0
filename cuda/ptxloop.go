package cuda

import (
	"regexp"
	"strings"
)

// Reading NVRTC's PTX for what the cost model cannot know from a body:
// how many instructions a kernel's main loop issues.

// ptxLabel is a basic block label line of NVRTC's PTX, and ptxBranch a
// branch to one.
var (
	ptxLabel  = regexp.MustCompile(`(?m)^(\$L__BB\w+):`)
	ptxBranch = regexp.MustCompile(`bra(\.uni)?\s+(\$L__BB\w+);`)
	// ptxVectorLoad is a 16-byte global load (a streamed weight).
	ptxVectorLoad = regexp.MustCompile(`ld\.global(\.nc)?\.v4\.`)
)

// ptxEntry is entry name's text in ptx ("" when absent).
func ptxEntry(ptx, name string) string {
	i := strings.Index(ptx, ".entry "+name+"(")
	if i < 0 {
		return ""
	}
	entry := ptx[i:]
	if j := strings.Index(entry, "\n}"); j >= 0 {
		entry = entry[:j]
	}
	return entry
}

// ptxLoops returns the bodies of entry's loops (a label through the
// backward branch to it) that contain a match of marker.
func ptxLoops(entry string, marker *regexp.Regexp) []string {
	labels := map[string]int{}
	for _, m := range ptxLabel.FindAllStringSubmatchIndex(entry, -1) {
		labels[entry[m[2]:m[3]]] = m[0]
	}
	var out []string
	for _, m := range ptxBranch.FindAllStringSubmatchIndex(entry, -1) {
		at, ok := labels[entry[m[4]:m[5]]]
		if ok && at <= m[0] && marker.MatchString(entry[at:m[1]]) {
			out = append(out, entry[at:m[1]])
		}
	}
	return out
}

// ptxInstructions counts the instructions of a stretch of PTX: every line
// that is not a label, a comment, a directive or a brace.
func ptxInstructions(text string) int {
	n := 0
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "$") || strings.HasPrefix(line, "//") || strings.HasPrefix(line, ".") || line == "{" || line == "}" {
			continue
		}
		n++
	}
	return n
}

var (
	ptxMMA = regexp.MustCompile(`mma\.sync`)
)

// MainLoopInstructions is the PTX instructions one iteration of kernel
// name's main loop issues per warp: the innermost loop around its mma
// (a tensor-core kernel) or around its 16-byte global loads (the
// matrix-vector kernel); 0 when the kernel has neither in a loop. It
// counts PTX, not SASS: ptxas merges and splits instructions, so it is a
// measure of the loop's weight, not its exact issue count.
func MainLoopInstructions(ptx, name string) int {
	entry := ptxEntry(ptx, name)
	marker := ptxVectorLoad
	if ptxMMA.MatchString(entry) {
		marker = ptxMMA
	}
	loops := ptxLoops(entry, marker)
	if len(loops) == 0 {
		return 0
	}
	inner := loops[0]
	for _, l := range loops[1:] {
		if len(l) < len(inner) {
			inner = l
		}
	}
	return ptxInstructions(inner)
}
