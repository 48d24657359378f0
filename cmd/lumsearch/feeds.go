package main

import (
	"flag"

	"github.com/lumsearch/lumsearch/search"
)

// feedFlags adds --input-range, --inputs and --outputs to fs, each usage
// after prefix (a subcommand's name where a command has several), and
// returns the feeds they fill.
func feedFlags(fs *flag.FlagSet, prefix string) *search.Feeds {
	feeds := &search.Feeds{Ranges: search.InputRanges{}}
	fs.Var(feeds.Ranges, "input-range", prefix+inputRangeUsage)
	fs.StringVar(&feeds.Inputs, "inputs", "", prefix+inputsUsage)
	fs.StringVar(&feeds.Outputs, "outputs", "", prefix+outputsUsage)
	return feeds
}

// atFlag defines --dim on fs as the values of a compiled program's
// runtime extents to run at (Feeds.At).
func atFlag(fs *flag.FlagSet, feeds *search.Feeds, prefix string) {
	feeds.At = search.SymbolValues{}
	fs.Var(feeds.At, "dim", prefix+"run at runtime extent `NAME=VALUE` (a decode step's past), within the range it was compiled for; default: several values across the range (repeatable)")
}

// The usage of the flags that say how a command feeds a model, shared by
// the commands that run one.
const (
	inputRangeUsage = "`NAME=LO..HI`: draw input, state or weight NAME's random values from LO..HI, not from the range its use implies (repeatable)"
	inputsUsage     = "take every input and state, and any weights it holds, from the safetensors `FILE` (named as the graph names them: the layout bench --save writes)"
	outputsUsage    = "compare the outputs, and any updated states it holds, with the safetensors `FILE`'s, within the verifier's allowance"

	// feedsDoc is the paragraph of a command's help on its inputs.
	feedsDoc = `
Random inputs are drawn from what they mean, inferred from their use in the
graph, never from their names: an index into a gather within the table's
rows, a position compared with an iota within its length, a 0/1 mask
(compared with zero, cast to bool, a where's condition, or flipped and
scaled as an additive attention mask) from {0, 1}, a value under a
logarithm or root positive, and any other integer from -9..9.
--input-range NAME=LO..HI states a leaf's range instead.`
)
