package main

import (
	"flag"
)

// sizeFlags are the flags that size a built graph, with what they count.
// The library reads a zero size as its default, so a flag given as 0 would
// silently mean something else: every command refuses it here instead.
var sizeFlags = []struct{ name, what string }{
	{"seq", "tokens per sequence"},
	{"batch", "sequences per batch"},
}

// checkSizeFlags refuses the size flags fs defines when their values
// cannot be honoured: a --seq or --batch that is not positive, and a
// --past outside the KV cache that --seq sizes (-1 is the default, the
// cache's last slot). Flags fs does not define are not checked.
func checkSizeFlags(fs *flag.FlagSet) error {
	for _, f := range sizeFlags {
		if v, ok := intFlag(fs, f.name); ok && v <= 0 {
			return usagef("--%s %d: must be positive (%s)", f.name, v, f.what)
		}
	}
	past, ok := intFlag(fs, "past")
	if !ok {
		return nil
	}
	seq, hasSeq := intFlag(fs, "seq")
	switch {
	case past < -1:
		return usagef("--past %d: want a position in the KV cache, or -1 for its last slot", past)
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
