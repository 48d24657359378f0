// Package step owns the contract of a serving step: one run of a compiled
// program over T tokens that belong to S sequences, each sequence giving a
// chunk of its prompt or one decode token, with every layer's keys and
// values in a pool of fixed-size blocks that a block table maps per
// sequence (paged attention). It names the step's inputs, describes the
// pool's layout, checks a batch's metadata before anything runs (bad
// metadata changes no cache slot), and pads a batch to the maxima the
// program was compiled for.
//
// The conventions are vLLM's where it has them: token ids and positions
// [T], query starts [S+1] (cumulative), sequence lengths [S] that count
// this step's tokens, a block table [S, blocks per sequence] and a slot
// mapping [T] into the pool where -1 marks a token whose key and value are
// not kept.
//
// The package imports nothing of the project but ir.
package step

import (
	"fmt"
	"math"
	"slices"
)

// The names of a step program's inputs, symbols and pools.
const (
	// TokensSymbol names T, the number of tokens present, in errors; the
	// program reads it as query_start[S], as vLLM reads
	// query_start_loc[-1].
	TokensSymbol = "tokens"
	// SeqsSymbol is S, the number of sequences present (an i32 scalar input).
	SeqsSymbol = "seqs"
	// ContextName is what --expect names a step's cached context per
	// sequence by: not a symbol of the program (lengths are metadata),
	// but the range the cost model prices paged attention over.
	ContextName = "context"

	InputIDs    = "input_ids"    // i64 [max tokens]
	Positions   = "positions"    // i32 [max tokens]
	QueryStarts = "query_start"  // i32 [max seqs + 1]
	SeqLens     = "seq_lens"     // i32 [max seqs]
	BlockTable  = "block_table"  // i32 [max seqs, blocks per sequence]
	SlotMapping = "slot_mapping" // i32 [max tokens]
)

// KeyPool and ValuePool name layer i's pools, the program's state buffers.
func KeyPool(layer int) string { return fmt.Sprintf("past_key_values.%d.key", layer) }

// ValuePool is layer i's value pool; see KeyPool.
func ValuePool(layer int) string { return fmt.Sprintf("past_key_values.%d.value", layer) }

// Layout is what a step program was compiled for: the maxima of its
// runtime extents and its KV pool.
type Layout struct {
	// MaxTokens and MaxSeqs bound T and S.
	MaxTokens int `json:"max_tokens"`
	MaxSeqs   int `json:"max_seqs"`
	// BlockSize is the number of positions a block holds.
	BlockSize int `json:"block_size"`
	// Blocks is the number of blocks in each layer's pool.
	Blocks int `json:"blocks"`
	// BlocksPerSeq is the block table's width: a sequence is at most
	// BlocksPerSeq*BlockSize positions long.
	BlocksPerSeq int `json:"blocks_per_seq"`
	// KVHeads and HeadDim give a slot's shape: a pool is
	// [Blocks*BlockSize, KVHeads, HeadDim], that is
	// [Blocks, BlockSize, KVHeads, HeadDim] in row-major order.
	KVHeads int `json:"kv_heads"`
	HeadDim int `json:"head_dim"`
	// Layers is the number of layers, each with a key and a value pool.
	Layers int `json:"layers"`
	// Vocab bounds the token ids.
	Vocab int `json:"vocab"`
	// Window, when positive, is the sliding window of every layer: a
	// token sees the Window latest positions, its own included.
	Window int `json:"window,omitempty"`
	// LayerWindows, when the layers' windows differ (gpt-oss alternates
	// sliding and full attention), is each layer's window (0: none), one
	// a layer; Window is 0 then. Empty when every layer has Window.
	LayerWindows []int `json:"layer_windows,omitempty"`
	// AllLogits says that the logits output has a row per token [T, vocab]
	// instead of one per sequence's last token [S, vocab].
	AllLogits bool `json:"all_logits,omitempty"`
}

// Slots is the number of slots in each pool.
func (l Layout) Slots() int { return l.Blocks * l.BlockSize }

// MaxLen is the longest sequence the block table can hold.
func (l Layout) MaxLen() int { return l.BlocksPerSeq * l.BlockSize }

// WindowOf is layer i's sliding window (0: none).
func (l Layout) WindowOf(i int) int {
	if len(l.LayerWindows) > 0 {
		return l.LayerWindows[i]
	}
	return l.Window
}

// Validate says whether the layout describes a program that can exist.
func (l Layout) Validate() error {
	switch {
	case l.MaxTokens < 1:
		return fmt.Errorf("max tokens %d; want at least 1", l.MaxTokens)
	case l.MaxSeqs < 1:
		return fmt.Errorf("max sequences %d; want at least 1", l.MaxSeqs)
	case l.MaxSeqs > l.MaxTokens:
		return fmt.Errorf("max sequences %d is more than max tokens %d: every sequence brings a token", l.MaxSeqs, l.MaxTokens)
	case l.BlockSize < 1:
		return fmt.Errorf("block size %d; want at least 1", l.BlockSize)
	case l.Blocks < 1:
		return fmt.Errorf("%d KV blocks; want at least 1", l.Blocks)
	case l.BlocksPerSeq < 1:
		return fmt.Errorf("%d blocks per sequence; want at least 1", l.BlocksPerSeq)
	case int64(l.Blocks)*int64(l.BlockSize) > 1<<31-1:
		return fmt.Errorf("%d blocks of %d slots do not fit an i32 slot index", l.Blocks, l.BlockSize)
	case l.Window < 0:
		return fmt.Errorf("window %d; want 0 (none) or positive", l.Window)
	case len(l.LayerWindows) > 0 && len(l.LayerWindows) != l.Layers:
		return fmt.Errorf("%d layer windows for %d layers; want one a layer", len(l.LayerWindows), l.Layers)
	case len(l.LayerWindows) > 0 && l.Window != 0:
		return fmt.Errorf("window %d and layer windows: one or the other", l.Window)
	}
	for i, w := range l.LayerWindows {
		if w < 0 {
			return fmt.Errorf("layer %d: window %d; want 0 (none) or positive", i, w)
		}
	}
	return nil
}

// Batch is one step's tokens and metadata, unpadded: T tokens of S
// sequences.
type Batch struct {
	// IDs are the tokens [T].
	IDs []int64
	// Positions are each token's position in its sequence [T].
	Positions []int32
	// QueryStarts [S+1]: sequence s's tokens are
	// QueryStarts[s]..QueryStarts[s+1]-1.
	QueryStarts []int32
	// SeqLens [S] are the sequences' lengths after this step.
	SeqLens []int32
	// BlockTable [S][*] lists each sequence's blocks in position order;
	// a row may be shorter than Layout.BlocksPerSeq.
	BlockTable [][]int32
	// SlotMapping [T] is the pool slot each token's key and value go to,
	// or -1 for a padding token whose key and value are not kept.
	SlotMapping []int32
}

// Tokens is T.
func (b *Batch) Tokens() int { return len(b.IDs) }

// Seqs is S.
func (b *Batch) Seqs() int { return len(b.SeqLens) }

// Padding is a slot mapping's mark for a token whose key and value are
// not written.
const Padding = -1

// Workload is the step the cost model and the floor price a program at,
// since a step's work follows metadata that no symbol carries: seqs
// sequences sharing the most tokens evenly, each after a context of half
// the longest sequence. Keys counts the positions all tokens attend
// (causally, each token its sequence's context plus the step tokens up
// to itself), Cached the context positions read from the pools, within
// the layout's Window; a layer of its own window counts Within it.
type Workload struct {
	Tokens, Seqs  int
	Keys, Cached  float64
	ContextPerSeq int
	// seqs are the sequences of a workload WorkloadOf made, for Within.
	seqs []SeqWork
}

// Within is the workload's Keys and Cached for a layer of sliding window
// window (0: none; a layer of the layout's Window gets the workload's own
// figures): each token's keys and each sequence's cached positions held
// to the window, exactly for a workload of listed sequences and as
// Priced holds them otherwise.
func (w Workload) Within(window int) (keys, cached float64) {
	if window <= 0 {
		return w.Keys, w.Cached
	}
	if w.seqs == nil {
		return math.Min(w.Keys, float64(w.Tokens*window)), math.Min(w.Cached, float64(w.Seqs*window))
	}
	for _, s := range w.seqs {
		cached += float64(min(s.Context, window))
		for j := range s.Tokens {
			keys += float64(min(s.Context+j+1, window))
		}
	}
	return math.Min(keys, w.Keys), math.Min(cached, w.Cached)
}

// Priced is the workload of a step with seqs sequences present.
func (l Layout) Priced(seqs int) Workload {
	seqs = min(max(seqs, 1), l.MaxSeqs, l.MaxTokens)
	T := l.MaxTokens
	per := float64(T) / float64(seqs)
	ctx := max(0, min(l.MaxLen()/2, l.MaxLen()-int(math.Ceil(per))))
	w := Workload{Tokens: T, Seqs: seqs, ContextPerSeq: ctx, Cached: float64(seqs * ctx)}
	// Each sequence's i-th step token attends ctx + i + 1 positions.
	w.Keys = float64(T)*float64(ctx) + float64(seqs)*per*(per+1)/2
	if l.Window > 0 {
		w.Keys = math.Min(w.Keys, float64(T*l.Window))
		w.Cached = math.Min(w.Cached, float64(seqs*l.Window))
	}
	return w
}

// SeqWork is one sequence's part in a step: Tokens of it in the step,
// after Context positions already in the pool.
type SeqWork struct{ Tokens, Context int }

// WorkloadOf is the workload of a step of the given sequences (a decode
// brings one token, a prompt chunk more), which must fit the layout.
func (l Layout) WorkloadOf(seqs []SeqWork) (Workload, error) {
	var w Workload
	if len(seqs) < 1 || len(seqs) > l.MaxSeqs {
		return w, fmt.Errorf("workload of %d sequences; the step takes 1..%d", len(seqs), l.MaxSeqs)
	}
	ctxs := 0
	for i, s := range seqs {
		if s.Tokens < 1 || s.Context < 0 || s.Context+s.Tokens > l.MaxLen() {
			return w, fmt.Errorf("workload sequence %d: %d tokens after a context of %d; want at least 1 token and at most %d positions", i, s.Tokens, s.Context, l.MaxLen())
		}
		w.Tokens += s.Tokens
		ctxs += s.Context
		cached := s.Context
		if l.Window > 0 {
			cached = min(cached, l.Window)
		}
		w.Cached += float64(cached)
		for j := range s.Tokens {
			// Token j attends the context and the step's tokens up
			// to itself, within the window.
			keys := s.Context + j + 1
			if l.Window > 0 {
				keys = min(keys, l.Window)
			}
			w.Keys += float64(keys)
		}
	}
	if w.Tokens > l.MaxTokens {
		return w, fmt.Errorf("workload of %d tokens; the step takes at most %d", w.Tokens, l.MaxTokens)
	}
	w.Seqs = len(seqs)
	w.ContextPerSeq = ctxs / len(seqs)
	w.seqs = slices.Clone(seqs)
	return w, nil
}

// Decoding is the workload of seqs sequences decoding one token each
// after a context of ctx positions (held to what a sequence can hold).
func (l Layout) Decoding(seqs, ctx int) Workload {
	seqs = min(max(seqs, 1), l.MaxSeqs)
	ctx = min(max(ctx, 0), l.MaxLen()-1)
	ss := make([]SeqWork, seqs)
	for i := range ss {
		ss[i] = SeqWork{Tokens: 1, Context: ctx}
	}
	w, _ := l.WorkloadOf(ss)
	return w
}
