package emu

import (
	"context"
	"encoding/binary"
	"fmt"
)

// Traffic is what one launch of a counting run (Count) asked of global
// memory and what that cost in DRAM traffic through the L2 model.
type Traffic struct {
	// LoadBytes and StoreBytes are the bytes the kernel's loads and
	// stores asked for, Loads and Stores how many accesses (a 16-byte
	// vector load is one).
	LoadBytes, StoreBytes int64
	Loads, Stores         int64
	// LineMisses counts accesses to a 128-byte line L2 did not hold.
	LineMisses int64
	// ReadBytes is what L2 fetched from DRAM (32-byte sectors a load
	// found missing), WriteBytes what it wrote back (dirty sectors, when
	// their line was evicted or at the end of the launch).
	ReadBytes, WriteBytes int64
	// LinesWritten counts the dirty lines written back.
	LinesWritten int64
}

// DRAM is the launch's DRAM traffic: bytes read plus bytes written.
func (t Traffic) DRAM() int64 { return t.ReadBytes + t.WriteBytes }

// L2 geometry of the counting runner (count.inc): LRU over lines, each
// of sectors filled and written back on their own, as NVIDIA's L2 does.
const (
	LineBytes   = 128
	SectorBytes = 32
)

// trafficWords is the 64-bit words the runner writes per launch
// (count.inc's Stats).
const trafficWords = 8

// Count runs launches as Run does, with every access to the buffers
// counted: each launch's loads and stores go, in the order the emulation
// makes them, through a model of the GPU's L2 of l2Bytes (LRU over
// 128-byte lines of 32-byte sectors, cold at every launch; count.inc) and
// Count returns each launch's traffic beside the buffers' final bytes.
//
// The counting runner is a build of its own: the kernel text is compiled
// unchanged with GCC's thread-sanitizer instrumentation, whose calls
// before every memory access the runner defines itself (no libtsan), so
// the count sees every access the compiled kernel makes through any
// pointer, without a kernel printed differently for it. It runs one
// worker: a launch's blocks reach L2 one after another in linear order
// (x fastest), where the GPU runs a wave of them at once. opt.Workers is
// ignored; a run is several times slower than Run's.
func Count(ctx context.Context, source string, kernels []Kernel, bufs []Buffer, launches []Launch, opt Options, l2Bytes int64) ([][]byte, []Traffic, error) {
	if l2Bytes < LineBytes {
		return nil, nil, fmt.Errorf("emu: an L2 of %d bytes holds no %d-byte line", l2Bytes, LineBytes)
	}
	return runner(ctx, source, kernels, bufs, launches, opt, l2Bytes)
}

// decodeTraffic reads n launches' figures (count.inc's Stats, in order)
// from data.
func decodeTraffic(data []byte, n int) []Traffic {
	out := make([]Traffic, n)
	for i := range out {
		w := func(j int) int64 {
			return int64(binary.LittleEndian.Uint64(data[8*(trafficWords*i+j):]))
		}
		out[i] = Traffic{
			LoadBytes: w(0), StoreBytes: w(1), Loads: w(2), Stores: w(3), LineMisses: w(4),
			ReadBytes: w(5) * SectorBytes, WriteBytes: w(6) * SectorBytes, LinesWritten: w(7),
		}
	}
	return out
}
