package emu

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"strconv"
	"time"

	"github.com/lumsearch/lumsearch/internal/mmap"
)

//go:embed emu.h
var header string

//go:embed runner.inc
var runnerSource string

//go:embed count.inc
var countSource string

// Header returns emu.h, the emulation header that the kernel text is compiled
// against.
func Header() string { return header }

// Param is one kernel parameter. Type is its C type: a pointer ("float*",
// "const float*", "lum_f16*", ...), an integer ("int", "unsigned", "long
// long", ...) or a float ("float", "double").
type Param struct {
	Name, Type string
}

// Kernel names an `extern "C" __global__` function of the source.
type Kernel struct {
	Name   string
	Params []Param
}

// Arg is one argument of a launch: a pointer into Buffer (Offset bytes from
// its start) for pointer parameters, Int for integer parameters (IsInt), Float
// for float parameters (IsFloat).
type Arg struct {
	Buffer  int
	Offset  int
	Int     int64
	IsInt   bool
	Float   float64
	IsFloat bool
}

// Launch is one kernel launch.
type Launch struct {
	Kernel      string
	Grid, Block [3]int
	Args        []Arg
	// Blocks, when not empty, are the only blocks of the grid that run:
	// linear block ids (x fastest, then y, then z), each in the grid and
	// listed once. blockIdx and gridDim still describe the whole grid, and
	// every check (guards, canaries, deadlocks, shuffling by Options.Seed
	// and the block id) applies to the blocks that run as in a whole run.
	Blocks []int
	// Seed, when not 0, seeds the launch's thread orders, copy landings and
	// modes (Options.Vary) with Options.Seed; 0 uses the launch's index in
	// its place, so that a caller who runs the same launch among others
	// can keep its draws the same by naming them.
	Seed uint64
}

// Buffer is one device buffer of Bytes bytes. Data, when not nil, is its
// initial content (len(Data) == Bytes); nil fills it with the NaN pattern.
type Buffer struct {
	Bytes int
	Data  []byte
}

// NaNPattern is the 32-bit little-endian word repeated from the start of a
// buffer given without data: a NaN as f32, and each of its halves a NaN as
// f16 and bf16. It is none of the NaNs arithmetic and conversions make
// (the canonical 0x7fff of a narrowing, a quieted f32 NaN), so that a
// kernel that writes a NaN (the reference's NaN, or a bug's) is seen to
// have written it.
const NaNPattern uint32 = 0x7fa57fa5

// Unwritten reports whether the n bytes at off of a buffer's final content
// (a buffer given without data) still hold the NaN pattern, that is,
// whether no launch wrote a different value there.
func Unwritten(data []byte, off, n int) bool {
	for i := off; i < off+n; i++ {
		if data[i] != byte(NaNPattern>>(8*(i&3))) {
			return false
		}
	}
	return true
}

// Landing is when a cp.async copy (lum_cp_async16) lands in shared memory,
// somewhere between its issue and the wait that completes its group.
type Landing uint8

// Landings.
const (
	// LandAtWait lands a copy at the wait that completes its group, the
	// latest moment the PTX ISA allows: a kernel that reads a copy its
	// wait does not cover (an off-by-one wait_group) reads stale data.
	LandAtWait Landing = iota
	// LandAtIssue lands a copy at once: a kernel that refills a buffer
	// other threads still read (a missing barrier before the refill)
	// overwrites their data.
	LandAtIssue
	// LandBetween lands each copy at a seeded moment: at issue, at one of
	// its thread's later scheduling points (barriers, warp collectives), or
	// at the wait.
	LandBetween
)

func (l Landing) String() string {
	switch l {
	case LandAtWait:
		return "at-wait"
	case LandAtIssue:
		return "at-issue"
	case LandBetween:
		return "between"
	}
	return fmt.Sprintf("Landing(%d)", uint8(l))
}

// Options tune a run. The zero value is valid.
type Options struct {
	Shuffle bool    // permute the order of a block's threads at every scheduling point
	Landing Landing // when cp.async copies land
	// Vary gives each block its own mode, overriding Shuffle and Landing:
	// the blocks of a launch, in the order they start, take the six
	// combinations of thread order (in order, shuffled) and landing in
	// turn from a start drawn from Seed and the launch's seed, so that any
	// six consecutive blocks try every combination and any three every
	// landing. Each block still runs once.
	Vary     bool
	Seed     uint64 // of the permutations, landings and modes
	Workers  int    // OS threads running blocks; 0 means GOMAXPROCS
	CacheDir string // compiled runners; "" means os.UserCacheDir()/lumsearch/emu
	Compiler string // "" means g++
	// Discard lists buffers whose final bytes the caller does not want (a
	// kernel's inputs): the runner does not write them back and Run
	// returns nil for them, which spares copying gigabytes of weights
	// back at real shapes.
	Discard []int
}

// Run compiles source (cached) with the kernels' launchers, performs the
// launches in order on fresh buffers and returns every buffer's final bytes
// (nil for those Options.Discard lists).
// A kernel failure (out-of-bounds access, misaligned vector access, deadlock,
// crash) is a *KernelError, a compilation failure a *CompileError; when ctx
// ends, the runner is killed and the error wraps ctx.Err().
func Run(ctx context.Context, source string, kernels []Kernel, bufs []Buffer, launches []Launch, opt Options) ([][]byte, error) {
	res, _, err := runner(ctx, source, kernels, bufs, launches, opt, 0)
	return res, err
}

// runner is Run, or with l2 > 0 Count's run through an L2 of l2 bytes.
func runner(ctx context.Context, source string, kernels []Kernel, bufs []Buffer, launches []Launch, opt Options, l2 int64) ([][]byte, []Traffic, error) {
	idx, err := validate(kernels, bufs, launches)
	if err != nil {
		return nil, nil, err
	}
	if opt.Landing > LandBetween {
		return nil, nil, fmt.Errorf("emu: Options.Landing is %v, not one of the landings", opt.Landing)
	}
	for _, i := range opt.Discard {
		if i < 0 || i >= len(bufs) {
			return nil, nil, fmt.Errorf("emu: Options.Discard names buffer %d of %d", i, len(bufs))
		}
	}
	bin, err := compile(ctx, placeShared(source, kernels), glue(kernels), &opt, l2 > 0)
	if err != nil {
		return nil, nil, err
	}
	workers := opt.Workers
	if l2 > 0 {
		workers = 1 // the runner runs one worker when counting
	} else if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	discard := make([]bool, len(bufs))
	for _, i := range opt.Discard {
		discard[i] = true
	}
	total := 0
	for i, b := range bufs {
		if !discard[i] {
			total += b.Bytes
		}
	}
	// The input and output go through pipes: at real shapes they are
	// gigabytes, which a file in shared memory would take in 4 KiB pages,
	// a fault each to write it and again for the runner to read it.
	args := []string{"-", "-"}
	if l2 > 0 {
		args = append(args, strconv.FormatInt(l2, 10))
		total += trafficWords * 8 * len(launches)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = 5 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, fmt.Errorf("emu: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, fmt.Errorf("emu: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("emu: start the runner: %w", err)
	}
	written := make(chan error, 1)
	go func() {
		err := writeInput(stdin, idx, bufs, launches, workers, opt)
		written <- errors.Join(err, stdin.Close())
	}()
	data := make([]byte, total)
	mmap.AdviseHuge(data)
	_, readErr := io.ReadFull(stdout, data)
	if readErr == nil {
		// The runner writes nothing more; anything more is a bug.
		if n, _ := io.Copy(io.Discard, stdout); n > 0 {
			readErr = fmt.Errorf("%d bytes more than the %d expected", n, total)
		}
	}
	writeErr := <-written
	runErr := cmd.Wait()
	if ctx.Err() != nil {
		return nil, nil, fmt.Errorf("emu: run stopped: %w", ctx.Err())
	}
	if kerr := parseStderr(stderr.Bytes(), launches); kerr != nil {
		return nil, nil, kerr
	}
	if runErr != nil {
		return nil, nil, fmt.Errorf("emu: runner failed: %w: %s", runErr, tail(stderr.Bytes(), 4096))
	}
	if writeErr != nil {
		return nil, nil, fmt.Errorf("emu: write the runner's input: %w", writeErr)
	}
	if readErr != nil {
		return nil, nil, fmt.Errorf("emu: read the runner's output: %w", readErr)
	}
	res := make([][]byte, len(bufs))
	for i, b := range bufs {
		if discard[i] {
			continue
		}
		res[i] = data[:b.Bytes:b.Bytes]
		data = data[b.Bytes:]
	}
	if l2 <= 0 {
		return res, nil, nil
	}
	return res, decodeTraffic(data, len(launches)), nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(bytes.TrimSpace(b))
}
