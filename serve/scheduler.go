package serve

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/lumsearch/lumsearch/step"
)

// Sequence is one request's tokens as the scheduler sees them: its prompt
// followed by what it generated, and how many of them have their keys and
// values in the pool.
type Sequence struct {
	// ID names the sequence; arrival order is ID order.
	ID uint64
	// Tokens are the prompt's ids followed by the generated ones.
	Tokens []int64
	// Prompt is how many of Tokens are the prompt's.
	Prompt int
	// MaxLen bounds len(Tokens): prompt plus max_tokens.
	MaxLen int

	computed int     // tokens whose keys and values are in the pool
	blocks   []int32 // the blocks it holds, in position order
	running  bool
	// Preempted counts the times its blocks were taken back.
	Preempted int
}

// Generated is the number of tokens generated so far.
func (s *Sequence) Generated() int { return len(s.Tokens) - s.Prompt }

// Computed is how many tokens have their keys and values in the pool.
func (s *Sequence) Computed() int { return s.computed }

// Blocks are the pool blocks the sequence holds (nil while waiting).
func (s *Sequence) Blocks() []int32 { return s.blocks }

// Chunk is one sequence's share of a step: Tokens[Start:Start+Len] go
// through the model; when Sampled, the step draws its next token.
type Chunk struct {
	Seq        *Sequence
	Start, Len int
	Sampled    bool
}

// Plan is one step the scheduler chose: the batch for the program and the
// chunks in batch order, one per sequence present.
type Plan struct {
	Batch  *step.Batch
	Chunks []Chunk
	// Preempted are the sequences whose blocks this step took back.
	Preempted []*Sequence
}

// Scheduler chooses each step's batch, first come first served: the
// running sequences in arrival order (each decode brings one token, a
// prompt still being prefilled a chunk), then the waiting ones in arrival
// order while the token budget, the step's sequences and the free blocks
// allow; the first waiting sequence that does not fit stops admission, so
// that a long prompt is not overtaken forever. When a running sequence
// needs a block and none is free, the newest running sequence is
// preempted: its blocks go back to the pool and it waits again at the
// front, to be computed again from its tokens (recompute), which yields
// the same tokens since sampling draws from the request's seed and the
// token's index. No step admits while it preempts.
//
// It is not safe for concurrent use: one loop owns it.
type Scheduler struct {
	layout  step.Layout
	blocks  *BlockAllocator
	budget  int
	waiting []*Sequence // arrival order
	running []*Sequence // arrival order
	// Preemptions counts the sequences preempted since the start.
	Preemptions int
}

// NewScheduler makes a scheduler for a step program's layout; budget is
// the most tokens a step carries and blocks the most pool blocks it hands
// out (0, or more than the program has, means the program's).
func NewScheduler(l step.Layout, budget, blocks int) (*Scheduler, error) {
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	if budget <= 0 || budget > l.MaxTokens {
		budget = l.MaxTokens
	}
	if blocks <= 0 || blocks > l.Blocks {
		blocks = l.Blocks
	}
	l.Blocks = blocks
	return &Scheduler{layout: l, blocks: NewBlockAllocator(blocks), budget: budget}, nil
}

// Blocks is the allocator of the pool's blocks.
func (s *Scheduler) Blocks() *BlockAllocator { return s.blocks }

// Waiting and Running count the sequences in each state.
func (s *Scheduler) Waiting() int { return len(s.waiting) }

// Running counts the sequences that hold blocks.
func (s *Scheduler) Running() int { return len(s.running) }

// MaxLen is the longest sequence (prompt plus output) the scheduler can
// ever run: the block table's width and the pool, whichever is shorter.
func (s *Scheduler) MaxLen() int {
	return min(s.layout.BlocksPerSeq, s.layout.Blocks) * s.layout.BlockSize
}

// Add queues a sequence; one that could never run (longer than MaxLen,
// or empty) is refused.
func (s *Scheduler) Add(q *Sequence) error {
	switch {
	case len(q.Tokens) == 0:
		return fmt.Errorf("sequence %d has no tokens", q.ID)
	case q.MaxLen < len(q.Tokens) || q.MaxLen > s.MaxLen():
		return fmt.Errorf("sequence %d: %d tokens and room for %d in all; the step holds %d positions a sequence", q.ID, len(q.Tokens), q.MaxLen, s.MaxLen())
	case q.Prompt < 1 || q.Prompt > len(q.Tokens):
		return fmt.Errorf("sequence %d: prompt of %d of its %d tokens", q.ID, q.Prompt, len(q.Tokens))
	}
	q.computed, q.blocks, q.running = 0, nil, false
	s.insertWaiting(q)
	return nil
}

// insertWaiting puts q in the waiting queue by arrival.
func (s *Scheduler) insertWaiting(q *Sequence) {
	i, _ := slices.BinarySearchFunc(s.waiting, q.ID, func(a *Sequence, id uint64) int { return cmp.Compare(a.ID, id) })
	s.waiting = slices.Insert(s.waiting, i, q)
}

// Remove takes a sequence out, waiting or running (finished, or its client
// gone), and frees its blocks. Removing one the scheduler does not hold
// does nothing.
func (s *Scheduler) Remove(q *Sequence) error {
	if i := slices.Index(s.waiting, q); i >= 0 {
		s.waiting = slices.Delete(s.waiting, i, i+1)
		return nil
	}
	i := slices.Index(s.running, q)
	if i < 0 {
		return nil
	}
	s.running = slices.Delete(s.running, i, i+1)
	return s.release(q)
}

func (s *Scheduler) release(q *Sequence) error {
	err := s.blocks.Release(q.blocks)
	q.blocks, q.computed, q.running = nil, 0, false
	if err != nil {
		return fmt.Errorf("sequence %d: %w", q.ID, err)
	}
	return nil
}

func (s *Scheduler) blocksFor(n int) int { return (n + s.layout.BlockSize - 1) / s.layout.BlockSize }

// grow gives q the blocks for length n, preempting the newest running
// sequences (never those already in the step, listed in taken) while the
// pool is short. It says false when q itself had to be preempted.
func (s *Scheduler) grow(q *Sequence, n int, p *Plan, taken map[*Sequence]bool) (bool, error) {
	need := s.blocksFor(n) - len(q.blocks)
	for need > s.blocks.Free() {
		victim := s.running[len(s.running)-1]
		if taken[victim] {
			return false, fmt.Errorf("scheduler: sequence %d needs %d blocks and only sequences already in the step hold the rest", q.ID, need)
		}
		s.running = s.running[:len(s.running)-1]
		if err := s.release(victim); err != nil {
			return false, err
		}
		victim.Preempted++
		s.Preemptions++
		s.insertWaiting(victim)
		p.Preempted = append(p.Preempted, victim)
		if victim == q {
			return false, nil
		}
	}
	if need > 0 {
		got, err := s.blocks.Alloc(need)
		if err != nil {
			return false, fmt.Errorf("scheduler: sequence %d: %w", q.ID, err)
		}
		q.blocks = append(q.blocks, got...)
	}
	return true, nil
}

// Schedule chooses the next step. It returns nil when no sequence waits
// or runs.
func (s *Scheduler) Schedule() (*Plan, error) {
	if len(s.running) == 0 && len(s.waiting) == 0 {
		return nil, nil
	}
	p := &Plan{}
	tokens, seqs := s.budget, s.layout.MaxSeqs
	taken := map[*Sequence]bool{}
	add := func(q *Sequence, n int) {
		p.Chunks = append(p.Chunks, Chunk{Seq: q, Start: q.computed, Len: n, Sampled: q.computed+n == len(q.Tokens)})
		taken[q] = true
		tokens -= n
		seqs--
	}
	for i := 0; i < len(s.running) && tokens > 0 && seqs > 0; i++ {
		q := s.running[i]
		n := min(len(q.Tokens)-q.computed, tokens)
		if n <= 0 {
			return nil, fmt.Errorf("scheduler: running sequence %d has nothing to compute", q.ID)
		}
		ok, err := s.grow(q, q.computed+n, p, taken)
		if err != nil {
			return nil, err
		}
		if !ok {
			break // q itself was preempted: it was the newest
		}
		add(q, n)
	}
	for len(p.Preempted) == 0 && len(s.waiting) > 0 && tokens > 0 && seqs > 0 {
		q := s.waiting[0]
		n := min(len(q.Tokens), tokens)
		if s.blocksFor(n) > s.blocks.Free() {
			break
		}
		s.waiting = s.waiting[1:]
		q.running = true
		s.running = append(s.running, q)
		if _, err := s.grow(q, n, p, taken); err != nil {
			return nil, err
		}
		add(q, n)
	}
	if len(p.Chunks) == 0 {
		return nil, fmt.Errorf("scheduler: nothing fits a step: %d waiting, %d running, %d of %d blocks free", len(s.waiting), len(s.running), s.blocks.Free(), s.blocks.Total())
	}
	p.Batch = s.batch(p.Chunks)
	return p, nil
}

// batch lays the chunks out as the step's metadata.
func (s *Scheduler) batch(chunks []Chunk) *step.Batch {
	b := &step.Batch{QueryStarts: []int32{0}}
	bs := s.layout.BlockSize
	for _, c := range chunks {
		q := c.Seq
		for pos := c.Start; pos < c.Start+c.Len; pos++ {
			b.IDs = append(b.IDs, q.Tokens[pos])
			b.Positions = append(b.Positions, int32(pos))
			b.SlotMapping = append(b.SlotMapping, q.blocks[pos/bs]*int32(bs)+int32(pos%bs))
		}
		b.QueryStarts = append(b.QueryStarts, int32(len(b.IDs)))
		b.SeqLens = append(b.SeqLens, int32(c.Start+c.Len))
		b.BlockTable = append(b.BlockTable, slices.Clone(q.blocks[:s.blocksFor(c.Start+c.Len)]))
	}
	return b
}

// Commit records that the plan's step ran: each chunk's tokens are in the
// pool. The caller then appends each sampled sequence's new token (or
// removes the sequence when it is done).
func (s *Scheduler) Commit(p *Plan) {
	for _, c := range p.Chunks {
		c.Seq.computed = c.Start + c.Len
	}
}
