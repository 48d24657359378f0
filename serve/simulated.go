package serve

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/lumsearch/lumsearch/serve/sample"
	"github.com/lumsearch/lumsearch/step"
)

// SimulatedEngine is a step that takes a given time and returns
// deterministic logits, for testing and measuring everything around the
// step without a model. It keeps a pool as the real step does: each token
// is written to its slot, and a sequence's logits are a hash of the
// tokens read back through its block table up to its length, so a
// scheduler that gives a sequence a wrong slot, block or length changes
// its answer (or, reading a slot never written or written at another
// position, fails the step).
type SimulatedEngine struct {
	layout step.Layout
	delay  time.Duration

	mu   sync.Mutex
	pool []simSlot
	// steps counts the steps run; seqs and tokens sum their S and T.
	steps, seqs, tokens int
}

// Counts are the steps run and the sums of their S and T.
func (e *SimulatedEngine) Counts() (steps, seqs, tokens int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.steps, e.seqs, e.tokens
}

type simSlot struct {
	token int64
	pos   int32
	set   bool
}

// NewSimulatedEngine makes a simulated step for layout l whose every step
// takes delay.
func NewSimulatedEngine(l step.Layout, delay time.Duration) (*SimulatedEngine, error) {
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("simulated step: %w", err)
	}
	if l.Vocab < 2 {
		return nil, fmt.Errorf("simulated step: vocabulary of %d; want at least 2", l.Vocab)
	}
	return &SimulatedEngine{layout: l, delay: delay, pool: make([]simSlot, l.Slots())}, nil
}

// Layout is the simulated program's layout.
func (e *SimulatedEngine) Layout() step.Layout { return e.layout }

// Device says the step is simulated.
func (e *SimulatedEngine) Device() string { return "simulated step" }

// Step checks the batch, writes its tokens to their slots, waits the
// step's time and draws each sequence's token from its logits on the host
// with the reference sampler.
func (e *SimulatedEngine) Step(ctx context.Context, b *step.Batch, draws []Draw) ([]Token, error) {
	if err := e.layout.Check(b); err != nil {
		return nil, fmt.Errorf("simulated step: %w", err)
	}
	if err := checkDraws(b, draws); err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	// Read first, writing into a copy of the touched slots, so that a
	// failed step changes nothing.
	written := map[int32]simSlot{}
	for t, slot := range b.SlotMapping {
		if slot != step.Padding {
			written[slot] = simSlot{token: b.IDs[t], pos: b.Positions[t], set: true}
		}
	}
	hashes := make([]uint64, b.Seqs())
	for s := range b.Seqs() {
		h := uint64(0x9e3779b97f4a7c15)
		for pos := range int(b.SeqLens[s]) {
			slot := b.BlockTable[s][pos/e.layout.BlockSize]*int32(e.layout.BlockSize) + int32(pos%e.layout.BlockSize)
			v, ok := written[slot]
			if !ok {
				v = e.pool[slot]
			}
			if !v.set || v.pos != int32(pos) {
				return nil, fmt.Errorf("simulated step: sequence %d reads position %d from slot %d, which holds %s", s, pos, slot, v.describe())
			}
			h = mix(h ^ uint64(v.token))
		}
		hashes[s] = h
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(e.delay):
	}
	for slot, v := range written {
		e.pool[slot] = v
	}
	e.steps++
	e.seqs += b.Seqs()
	e.tokens += b.Tokens()
	out := make([]Token, b.Seqs())
	logits := make([]float32, e.layout.Vocab)
	for s, h := range hashes {
		SimulatedLogits(h, logits)
		id, lp := sample.Reference(logits, draws[s].Params, draws[s].Index)
		out[s] = Token{ID: int64(id), Logprob: lp}
	}
	return out, nil
}

func (v simSlot) describe() string {
	if !v.set {
		return "nothing"
	}
	return fmt.Sprintf("position %d", v.pos)
}

// SimulatedLogits fills logits with values in [-4, 4) drawn from a hash
// of a sequence's tokens.
func SimulatedLogits(h uint64, logits []float32) {
	for v := range logits {
		x := mix(h + uint64(v)*0xbf58476d1ce4e5b9)
		logits[v] = float32(8*(float64(x>>11)/math.Exp2(53)) - 4)
	}
}

// mix is splitmix64's finaliser.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}
