package cuda

import (
	"regexp"
	"strings"

	"github.com/lumsearch/lumsearch/cost"
)

// Reading NVRTC's PTX for what the cost model cannot know from a body:
// how many instructions a kernel's main loop issues.

// ptxLabel is a basic block label line of NVRTC's PTX, and ptxBranch a
// branch to one.
var (
	ptxLabel  = regexp.MustCompile(`(?m)^(\$L__BB\w+):`)
	ptxBranch = regexp.MustCompile(`bra(\.uni)?\s+(\$L__BB\w+);`)
	// ptxVectorLoad is a 16-byte global load (a streamed weight), and
	// ptxHalfLoad an 8-byte one (an awq weight's 16-column lanes).
	ptxVectorLoad = regexp.MustCompile(`ld\.global(\.nc)?\.v4\.`)
	ptxHalfLoad   = regexp.MustCompile(`ld\.global(\.nc)?\.v2\.u32`)
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
	return ptxInstructions(mainLoop(ptxEntry(ptx, name), false))
}

// mainLoop is the text of entry's main loop: the innermost loop around its
// mma (a tensor-core kernel) or its 16-byte global loads (or 8-byte ones
// nested in it), else, with anyLoad, the innermost loop that loads global
// memory at all; "" when there is none.
func mainLoop(entry string, anyLoad bool) string {
	marker := ptxVectorLoad
	if ptxMMA.MatchString(entry) {
		marker = ptxMMA
	}
	loops := ptxLoops(entry, marker)
	if len(loops) == 0 && anyLoad {
		loops = ptxLoops(entry, ptxAnyLoop)
	}
	if len(loops) == 0 {
		return ""
	}
	inner := loops[0]
	for _, l := range loops[1:] {
		if len(l) < len(inner) {
			inner = l
		}
	}
	if marker == ptxVectorLoad {
		// A loop of 8-byte loads within it is the main loop: a
		// quantized matrix-vector kernel whose 16-column awq lanes
		// stream their codes 8 bytes at a time, in slabs whose loop
		// loads the scales 16 at a time (gemv_quant.go).
		for _, l := range ptxLoops(inner, ptxHalfLoad) {
			if len(l) < len(inner) {
				inner = l
			}
		}
	}
	return inner
}

// ptxAnyLoop marks a loop worth pricing: one that moves global memory or
// runs the tensor cores.
var ptxAnyLoop = regexp.MustCompile(`ld\.global|cp\.async\.(ca|cg)|mma\.sync`)

// LoopMix is the instruction mix of one iteration of kernel name's main
// loop, per warp and by pipe: the innermost loop around its mma or its
// 16-byte loads (as MainLoopInstructions), else the innermost loop that
// loads global memory at all (an attention's key loop). Zero when the
// kernel has no such loop. It reads PTX, so a 64-bit operation counts as
// the two 32-bit ones it becomes, and an integer division or remainder
// as the sequence ptxas expands it to (see ptxWeight).
func LoopMix(ptx, name string) cost.IssueMix {
	return PTXMix(mainLoop(ptxEntry(ptx, name), true))
}

// PTXMix counts a stretch of PTX's instructions by pipe.
func PTXMix(text string) cost.IssueMix {
	var m cost.IssueMix
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "$") || strings.HasPrefix(line, "//") || strings.HasPrefix(line, ".") || line == "{" || line == "}" {
			continue
		}
		if strings.HasPrefix(line, "@") { // a guard predicate
			if i := strings.IndexByte(line, ' '); i > 0 {
				line = strings.TrimSpace(line[i:])
			}
		}
		op := line
		if i := strings.IndexAny(op, " \t;"); i >= 0 {
			op = op[:i]
		}
		pipe, n := ptxWeight(op)
		switch pipe {
		case pipeInt:
			m.Int += n
		case pipeFP:
			m.FP += n
		case pipeLoad:
			m.Load += n
		case pipeShared:
			m.Shared += n
		default:
			m.Other += n
		}
	}
	return m
}

type ptxPipe int

const (
	pipeOther ptxPipe = iota
	pipeInt
	pipeFP
	pipeLoad
	pipeShared
)

// Integer division and remainder have no instruction: ptxas expands them.
// The CUDA C++ Programming Guide ("Integer Arithmetic") says a 32-bit one
// compiles to up to 20 instructions; a 64-bit one is a called subroutine
// of several times that (about 70 instructions in the SASS of sm_80 and
// sm_90 kernels read with cuobjdump, an estimate).
const (
	div32Instructions = 20
	div64Instructions = 70
)

// ptxWeight is the pipe a PTX opcode (with its type suffixes) issues to
// and the instructions it weighs there.
func ptxWeight(op string) (ptxPipe, float64) {
	parts := strings.Split(op, ".")
	base := parts[0]
	has := func(s ...string) bool {
		for _, p := range parts[1:] {
			for _, x := range s {
				if p == x {
					return true
				}
			}
		}
		return false
	}
	wide := has("s64", "u64", "b64")
	float := has("f32", "f16", "bf16", "f16x2", "bf16x2", "f64")
	switch base {
	case "ld", "st", "atom", "red":
		switch {
		case has("shared"):
			return pipeShared, 1
		case has("global", "local"):
			return pipeLoad, 1
		}
		return pipeOther, 1 // parameters, constants
	case "ldmatrix", "stmatrix":
		return pipeShared, 1
	case "cp":
		if has("commit_group", "wait_group", "wait_all") {
			return pipeOther, 1
		}
		return pipeLoad, 1
	case "div", "rem":
		switch {
		case float:
			return pipeFP, 8 // an approximate reciprocal and its refinement
		case wide:
			return pipeInt, div64Instructions
		}
		return pipeInt, div32Instructions
	case "fma", "add", "sub", "mul", "mad", "min", "max", "neg", "abs", "setp", "set", "selp", "testp", "copysign":
		if float && base != "selp" {
			return pipeFP, 1
		}
		if wide && !has("wide") {
			return pipeInt, 2
		}
		return pipeInt, 1
	case "ex2", "lg2", "rcp", "sqrt", "rsqrt", "sin", "cos", "tanh":
		return pipeFP, 1
	case "and", "or", "xor", "not", "shl", "shr", "bfe", "bfi", "prmt", "popc", "clz", "brev", "mul24", "mad24", "sad", "shf", "lop3", "cvta":
		if wide {
			return pipeInt, 2
		}
		return pipeInt, 1
	}
	return pipeOther, 1
}
