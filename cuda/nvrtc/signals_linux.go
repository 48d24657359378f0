package nvrtc

import (
	"sync"
	"syscall"
	"unsafe"
)

// NVRTC's compiler (LLVM) installs its own signal handlers around a
// compilation and, when it puts the previous ones back, drops their
// SA_ONSTACK and SA_SIGINFO flags (seen with NVRTC 11.8 on SIGINT and
// SIGTERM). The Go runtime then takes the next such signal on a goroutine
// stack and dies ("non-Go code set up signal handler without SA_ONSTACK
// flag"): a Ctrl-C after the first compilation crashed "lumsearch
// optimize" instead of stopping it. So the signal actions are recorded
// before a compilation starts (when none is running: a running one may
// have its handlers in place) and put back when each ends.

// kernelSigaction is the kernel's struct sigaction on amd64 and arm64:
// handler, flags, restorer, mask.
type kernelSigaction [4]uint64

// numSignals covers the standard and real-time signals.
const numSignals = 65

var (
	signalsMu    sync.Mutex
	compiling    int // compilations running
	savedSignals [numSignals]*kernelSigaction
)

func sigaction(sig int, set, old *kernelSigaction) bool {
	_, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(set)), uintptr(unsafe.Pointer(old)), 8, 0, 0)
	return e == 0
}

// saveSignals marks a compilation's start, recording every signal's
// action when no other compilation runs.
func saveSignals() {
	signalsMu.Lock()
	defer signalsMu.Unlock()
	if compiling == 0 {
		for sig := 1; sig < numSignals; sig++ {
			var a kernelSigaction
			savedSignals[sig] = nil
			if sigaction(sig, nil, &a) {
				savedSignals[sig] = &a
			}
		}
	}
	compiling++
}

// restoreSignals marks a compilation's end and puts back every signal
// action that differs from the recorded one.
func restoreSignals() {
	signalsMu.Lock()
	defer signalsMu.Unlock()
	compiling--
	for sig := 1; sig < numSignals; sig++ {
		want := savedSignals[sig]
		if want == nil {
			continue
		}
		var cur kernelSigaction
		if sigaction(sig, nil, &cur) && cur != *want {
			sigaction(sig, want, nil)
		}
	}
}
