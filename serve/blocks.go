package serve

import (
	"fmt"
	"slices"
)

// BlockAllocator hands out the KV pool's blocks. Each block has a
// reference count, so that a block two sequences share (a common prefix)
// returns to the free list only when both let it go; the scheduler takes
// one reference per block a sequence holds.
type BlockAllocator struct {
	refs []int32
	// free is a stack: the block freed last is handed out first, as
	// vLLM's free queue does, which keeps recently written blocks hot.
	free []int32
}

// NewBlockAllocator makes an allocator over n blocks, all free.
func NewBlockAllocator(n int) *BlockAllocator {
	a := &BlockAllocator{refs: make([]int32, n), free: make([]int32, n)}
	for i := range n {
		a.free[i] = int32(n - 1 - i) // block 0 is handed out first
	}
	return a
}

// Total is the number of blocks in the pool.
func (a *BlockAllocator) Total() int { return len(a.refs) }

// Free is the number of blocks no sequence holds.
func (a *BlockAllocator) Free() int { return len(a.free) }

// Used is the number of blocks some sequence holds.
func (a *BlockAllocator) Used() int { return len(a.refs) - len(a.free) }

// Alloc takes n free blocks, each with one reference, or none when fewer
// than n are free.
func (a *BlockAllocator) Alloc(n int) ([]int32, error) {
	if n < 0 || n > len(a.free) {
		return nil, fmt.Errorf("alloc %d KV blocks: %d of %d are free", n, len(a.free), len(a.refs))
	}
	got := slices.Clone(a.free[len(a.free)-n:])
	slices.Reverse(got)
	a.free = a.free[:len(a.free)-n]
	for _, b := range got {
		a.refs[b] = 1
	}
	return got, nil
}

// Retain adds a reference to each of blocks, which must be held.
func (a *BlockAllocator) Retain(blocks []int32) error {
	for _, b := range blocks {
		if err := a.held(b); err != nil {
			return fmt.Errorf("retain: %w", err)
		}
	}
	for _, b := range blocks {
		a.refs[b]++
	}
	return nil
}

// Release drops a reference to each of blocks; a block whose last
// reference goes returns to the free list. Releasing a block that is not
// held is an error and changes nothing.
func (a *BlockAllocator) Release(blocks []int32) error {
	drop := map[int32]int32{}
	for _, b := range blocks {
		if err := a.held(b); err != nil {
			return fmt.Errorf("release: %w", err)
		}
		drop[b]++
		if drop[b] > a.refs[b] {
			return fmt.Errorf("release: block %d released %d times with %d references", b, drop[b], a.refs[b])
		}
	}
	for _, b := range blocks {
		a.refs[b]--
		if a.refs[b] == 0 {
			a.free = append(a.free, b)
		}
	}
	return nil
}

// Refs is block b's reference count.
func (a *BlockAllocator) Refs(b int32) int32 { return a.refs[b] }

func (a *BlockAllocator) held(b int32) error {
	if b < 0 || int(b) >= len(a.refs) {
		return fmt.Errorf("block %d is outside the pool of %d", b, len(a.refs))
	}
	if a.refs[b] == 0 {
		return fmt.Errorf("block %d is free", b)
	}
	return nil
}
