package corpus

import (
	"fmt"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
)

// Options size a built graph. Zero Batch, Seq and DType take their
// defaults; see each field and DefaultOptions.
type Options struct {
	// Batch is the number of sequences (default 1).
	Batch int
	// Seq is the number of tokens per sequence (default 128). For a decode
	// step it is the KV cache's capacity instead: the caches are
	// [Batch, kv heads, Seq, head size], and the step attends over
	// positions 0..Past.
	Seq int
	// Past is, for a decode step, the number of tokens already in the
	// cache: the new token is written at position Past and attends over
	// positions 0..Past, so Past must be below Seq. Past >= 0 pins the
	// position at compile time (the zero Options decode the first token).
	// A negative Past, which DefaultOptions asks for, makes the position
	// a runtime symbol: input "past" (i32 scalar) over
	// PastMin..PastMax, one program for every position. Other kinds
	// ignore it.
	Past int
	// PastMin and PastMax bound a runtime position; PastMax 0 means
	// Seq-1, the cache's last slot.
	PastMin, PastMax int
	// Cache is, for a prefill, the KV caches' capacity (default Seq):
	// the prefill writes positions 0..Seq-1 of caches laid out as a
	// decode step with Seq = Cache reads them, so that its state is the
	// decode program's starting state. Other kinds ignore it.
	Cache int
	// MaxSeq, when positive, is the KV caches' capacity whatever the
	// kind: a decode step's Seq, a prefill's Cache (--max-seq). Other
	// kinds ignore it.
	MaxSeq int
	// DType is the dtype of weights and activations (default f32; f16 and
	// bf16 allowed). As in Hugging Face's models, norms, softmax and the
	// rotary tables are computed in f32 with casts around them when DType
	// is lower, and logits are cast to f32.
	DType ir.DType
	// Composite makes the builders emit the composite softmax, RMS norm,
	// layer norm and attention ops in the model's dtype instead of their
	// decompositions, for the tests of later phases. Attention with a
	// sliding window that cuts into a prefill stays decomposed, since the
	// attention op has no window.
	Composite bool
	// Weights, when a quantized format, stores the layers' linear
	// weights (attention, MLP and experts projections) in it, as a
	// checkpoint of that format would (see Quantization): fp8 in 128 ×
	// 128 blocks where both extents divide by 128, else per output
	// channel; awq and gptq in groups of 128 inputs, or one group where
	// the inputs do not divide by 128; mxfp4 in its blocks of 32 inputs,
	// which must divide them. The embeddings, the LM head and the
	// routers stay in DType, and so do the modules the config's
	// quantization_config leaves out. quant.None, the zero value, stores
	// them as the config's quantization_config says (gpt-oss's experts
	// in MXFP4, as its checkpoints are), or in DType without one.
	Weights quant.Format
	// PlainWeights stores every weight in DType, whatever the config's
	// quantization_config says (--weights none): gpt-oss's experts as
	// bf16 checkpoints have them.
	PlainWeights bool

	// Step sizes a serving step (the step kind; see package step): the
	// most tokens and sequences one step runs, the pool's block size and
	// block count, and whether every token's logits are output. Seq (or
	// MaxSeq) is then the longest sequence a block table row holds.
	// Zero fields take the defaults below; other kinds ignore them.
	Step StepOptions
}

// StepOptions size a serving step; see Options.Step.
type StepOptions struct {
	MaxTokens int // --max-tokens (default 256)
	MaxSeqs   int // --max-seqs (default min(32, MaxTokens))
	BlockSize int // --block-size (default 16)
	// KVBlocks is the number of blocks in each layer's pool (--kv-blocks);
	// the default holds MaxSeqs sequences at the longest length.
	KVBlocks  int
	AllLogits bool // logits for every token [T, vocab], not each sequence's last [S, vocab]
}

// The defaults of StepOptions.
const (
	DefaultMaxTokens = 256
	DefaultMaxSeqs   = 32
	DefaultBlockSize = 16
)

// resolve fills a step's defaults in for sequences of up to seq
// positions, and checks them.
func (o StepOptions) resolve(seq int) (StepOptions, error) {
	if o.MaxTokens == 0 {
		o.MaxTokens = DefaultMaxTokens
	}
	if o.MaxSeqs == 0 {
		o.MaxSeqs = min(DefaultMaxSeqs, o.MaxTokens)
	}
	if o.BlockSize == 0 {
		o.BlockSize = DefaultBlockSize
	}
	switch {
	case o.MaxTokens < 0:
		return o, fmt.Errorf("max tokens %d; want a positive count", o.MaxTokens)
	case o.MaxSeqs < 0:
		return o, fmt.Errorf("max sequences %d; want a positive count", o.MaxSeqs)
	case o.BlockSize < 0:
		return o, fmt.Errorf("block size %d; want a positive size", o.BlockSize)
	case o.KVBlocks < 0:
		return o, fmt.Errorf("%d KV blocks; want a positive count", o.KVBlocks)
	}
	if o.KVBlocks == 0 {
		o.KVBlocks = o.MaxSeqs * ((seq + o.BlockSize - 1) / o.BlockSize)
	}
	return o, nil
}

// The defaults of Options.
const (
	DefaultBatch = 1
	DefaultSeq   = 128
)

// DefaultOptions are the options corpus list builds every graph with:
// batch 1, 128 tokens (a 128-position cache for a decode step, which
// fills its last slot), f32, decomposed.
func DefaultOptions() Options {
	return Options{Batch: DefaultBatch, Seq: DefaultSeq, Past: -1, DType: ir.F32}
}

// resolve fills the defaults in and checks the options.
func (o Options) resolve() (Options, error) {
	if o.Batch == 0 {
		o.Batch = DefaultBatch
	}
	if o.Seq == 0 {
		o.Seq = DefaultSeq
	}
	if o.DType == ir.InvalidDType {
		o.DType = ir.F32
	}
	if o.Batch < 0 {
		return o, fmt.Errorf("batch %d; want a positive batch", o.Batch)
	}
	if o.Seq < 0 {
		return o, fmt.Errorf("seq %d; want a positive length", o.Seq)
	}
	if !o.DType.IsFloat() {
		return o, fmt.Errorf("dtype %s; want f32, f16 or bf16", o.DType)
	}
	if o.Weights != quant.None && (o.PlainWeights || !o.Weights.Valid()) {
		return o, fmt.Errorf("weights %s: want one of mxfp4, fp8, awq and gptq, or plain weights in the dtype", o.Weights)
	}
	if o.Cache == 0 {
		o.Cache = o.Seq
	}
	if o.Cache < o.Seq {
		return o, fmt.Errorf("cache %d (--max-seq): want at least seq %d, the positions a prefill writes", o.Cache, o.Seq)
	}
	if o.Past < 0 {
		if o.PastMax == 0 {
			o.PastMax = o.Seq - 1
		}
		if o.PastMin < 0 || o.PastMin > o.PastMax || o.PastMax >= o.Seq {
			return o, fmt.Errorf("past %d..%d: want 0 <= LO <= HI below seq %d, the KV cache's capacity", o.PastMin, o.PastMax, o.Seq)
		}
	}
	return o, nil
}
