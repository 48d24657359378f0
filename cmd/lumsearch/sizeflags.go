package main

import (
	"flag"
	"fmt"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
	"github.com/lumsearch/lumsearch/search"
)

// sizeFlags are the flags that size a built graph, with what they count.
// The library reads a zero size as its default, so a flag given as 0 would
// silently mean something else: every command refuses it here instead.
var sizeFlags = []struct{ name, what string }{
	{"seq", "tokens per sequence"},
	{"batch", "sequences per batch"},
}

// maxSeqChecked refuses a negative --max-seq (0 means absent).
func maxSeqChecked(fs *flag.FlagSet) error {
	if v, ok := intFlag(fs, "max-seq"); ok && v < 0 {
		return usagef("--max-seq %d: must be positive (the KV cache's capacity)", v)
	}
	return nil
}

// checkSizeFlags refuses the size flags fs defines when their values
// cannot be honoured: a --seq or --batch that is not positive, and a
// --past outside the KV cache that --seq sizes (-1 is the default, the
// runtime position). Flags fs does not define are not checked.
func checkSizeFlags(fs *flag.FlagSet) error {
	if err := maxSeqChecked(fs); err != nil {
		return err
	}
	for _, f := range sizeFlags {
		if v, ok := intFlag(fs, f.name); ok && v <= 0 {
			return usagef("--%s %d: must be positive (%s)", f.name, v, f.what)
		}
	}
	var bad error
	fs.Visit(func(f *flag.Flag) {
		for _, sf := range stepSizeFlags {
			if v, ok := intFlag(fs, sf.name); ok && f.Name == sf.name && v <= 0 && bad == nil {
				bad = usagef("--%s %d: must be positive (%s)", sf.name, v, sf.what)
			}
		}
	})
	if bad != nil {
		return bad
	}
	past, ok := intFlag(fs, "past")
	if !ok {
		return nil
	}
	seq, hasSeq := intFlag(fs, "seq")
	switch {
	case past < -1:
		return usagef("--past %d: want a position in the KV cache, or -1 for a runtime position", past)
	case hasSeq && past >= seq:
		return usagef("--past %d is beyond the KV cache: --seq %d holds positions 0 to %d", past, seq, seq-1)
	}
	return nil
}

// intFlag is the value of fs's int flag name, if fs defines one.
func intFlag(fs *flag.FlagSet, name string) (int, bool) {
	f := fs.Lookup(name)
	if f == nil {
		return 0, false
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return 0, false
	}
	v, ok := g.Get().(int)
	return v, ok
}

// dimUsage is the --dim flag's help.
const dimUsage = "an ONNX model's symbolic dimension `NAME=VALUE`, or a decode step's position: past=P pins it, past=LO..HI makes it a runtime extent over that range (default 0..seq-1) (repeatable)"

// dimFlag defines --dim on fs: pins and runtime ranges.
func dimFlag(fs *flag.FlagSet, usage string) search.DimFlag {
	d := search.DimFlag{Pins: search.Dims{}, Ranges: map[string]ir.Symbol{}}
	fs.Var(d, "dim", usage)
	return d
}

// maxSeqFlag defines --max-seq on fs, the KV cache's capacity of a decode
// step: another name for --seq, whose value it replaces when given.
func maxSeqFlag(fs *flag.FlagSet) *int {
	return fs.Int("max-seq", 0, "the KV cache's capacity N, positions 0..N-1: a decode step's (the same as --seq; wins over it) or a prefill's (default --seq)")
}

// expectUsage is the --expect flag's help.
const expectUsage = "where runtime extent NAME is expected to run, `NAME=LO..HI` (a decode step's past, or a serving step's context: the positions each sequence has cached): the cost model prices over that range, not the whole compiled range (repeatable)"

// stepSizeFlags size a serving step (the step kind); 0, their default,
// means the corpus default, so a 0 given on the command line is refused.
var stepSizeFlags = []struct{ name, what string }{
	{"max-tokens", "the most tokens one step runs"},
	{"max-seqs", "the most sequences one step runs"},
	{"block-size", "positions per KV block"},
	{"kv-blocks", "blocks in each layer's KV pool"},
}

// stepFlags defines on fs the flags that size a serving step, read into
// the returned options.
func stepFlags(fs *flag.FlagSet) *corpus.StepOptions {
	o := &corpus.StepOptions{}
	fs.IntVar(&o.MaxTokens, "max-tokens", 0, "a serving step's most tokens T, a runtime extent 1..N (step kind; default 256)")
	fs.IntVar(&o.MaxSeqs, "max-seqs", 0, "a serving step's most sequences S, a runtime extent 1..N (step kind; default min(32, --max-tokens))")
	fs.IntVar(&o.BlockSize, "block-size", 0, "positions per block of the paged KV pool (step kind; default 16)")
	fs.IntVar(&o.KVBlocks, "kv-blocks", 0, "blocks in each layer's KV pool (step kind; default: --max-seqs sequences of --max-seq positions)")
	fs.BoolVar(&o.AllLogits, "all-logits", false, "output every token's logits [T, vocab], not each sequence's last [S, vocab] (step kind)")
	return o
}

// weightsUsage is the --weights flag's help.
const weightsUsage = "how a corpus or config model stores its layers' linear weights (attention, MLP, experts): " +
	"`FORMAT` mxfp4, fp8, awq or gptq packs them as such a checkpoint does (the embeddings, LM head and routers stay in --dtype); " +
	"none keeps every weight in --dtype (default: as the config's quantization_config says: gpt-oss's experts MXFP4, as its checkpoints)"

// weightsValue is --weights: a quantized format, none, or unset (the
// config's own).
type weightsValue struct {
	format quant.Format
	plain  bool
}

// weightsFlag defines --weights on fs, its help after prefix.
func weightsFlag(fs *flag.FlagSet, prefix string) *weightsValue {
	w := &weightsValue{}
	fs.Var(w, "weights", prefix+weightsUsage)
	return w
}

// String is the flag's value as given: "" when unset.
func (w *weightsValue) String() string {
	switch {
	case w == nil:
		return ""
	case w.plain:
		return "none"
	case w.format.Valid():
		return w.format.String()
	}
	return ""
}

// Set reads mxfp4, fp8, awq, gptq or none.
func (w *weightsValue) Set(s string) error {
	if s == "none" {
		w.format, w.plain = quant.None, true
		return nil
	}
	f, err := quant.ParseFormat(s)
	if err != nil || !f.Valid() {
		return fmt.Errorf("%q: want mxfp4, fp8, awq, gptq or none", s)
	}
	w.format, w.plain = f, false
	return nil
}

// apply sets the build options the flag gives.
func (w *weightsValue) apply(o corpus.Options) corpus.Options {
	o.Weights, o.PlainWeights = w.format, w.plain
	return o
}
