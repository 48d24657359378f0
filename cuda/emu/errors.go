package emu

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// KernelError is a failure that the runner detected while it ran a launch.
type KernelError struct {
	Kind   string // out-of-bounds, misaligned, deadlock, stack-overflow, fault, usage, emulator
	Launch int    // index into the launches; -1 before the first
	Kernel string
	Block  []int // block index (x, y, z); nil when unknown
	Thread []int // thread index (x, y, z); nil when no single thread is at fault
	Msg    string
}

func (e *KernelError) Error() string {
	var b strings.Builder
	b.WriteString("emu: ")
	if e.Launch >= 0 {
		fmt.Fprintf(&b, "kernel %s (launch %d)", e.Kernel, e.Launch)
		if e.Block != nil {
			fmt.Fprintf(&b, ", block (%d,%d,%d)", e.Block[0], e.Block[1], e.Block[2])
		}
		if e.Thread != nil {
			fmt.Fprintf(&b, ", thread (%d,%d,%d)", e.Thread[0], e.Thread[1], e.Thread[2])
		}
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// parseStderr finds the runner's LUMEMU error line.
func parseStderr(stderr []byte, launches []Launch) *KernelError {
	for line := range bytes.Lines(stderr) {
		f := strings.SplitN(strings.TrimRight(string(line), "\n"), "\t", 7)
		if len(f) != 7 || f[0] != "LUMEMU" {
			continue
		}
		e := &KernelError{Kind: f[1], Kernel: f[3], Msg: f[6], Launch: -1}
		if n, err := strconv.Atoi(f[2]); err == nil && n < len(launches) {
			e.Launch = n
		}
		e.Block, e.Thread = triple(f[4]), triple(f[5])
		return e
	}
	return nil
}

func triple(s string) []int {
	p := strings.Split(s, ",")
	if len(p) != 3 {
		return nil
	}
	v := make([]int, 3)
	for i := range p {
		n, err := strconv.Atoi(p[i])
		if err != nil {
			return nil
		}
		v[i] = n
	}
	return v
}
