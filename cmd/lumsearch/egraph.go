package main

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"strings"

	"github.com/lumsearch/lumsearch/egraph"
)

// egraphCommand loads an egraph-serialize file and reports its size.
var egraphCommand = &command{
	name:     "egraph",
	summary:  "load an egraph-serialize JSON file and report its size",
	synopsis: "egraph FILE.json [--dot OUT.dot] [--json]",
	doc: `
Read FILE.json in the egraph-serialize format (the format of egg's
egraph-serialize crate and of the extraction-gym benchmark files), build it
into an e-graph, rebuild it, and print the file, the number of e-classes and
e-nodes after rebuilding, the root e-classes under the file's names for them,
the number of distinct operators, and how long reading and building took.

With --dot, also draw the e-graph in Graphviz dot (one cluster per e-class,
one box per e-node); this is refused for e-graphs over 2000 e-nodes, which dot
cannot lay out usefully.`,
	example: `
lumsearch egraph egraph/testdata/ac4.json
lumsearch egraph egraph/testdata/ac4.json --dot ac4.dot && dot -Tsvg ac4.dot -o ac4.svg
lumsearch egraph egraph/testdata/ac4.json --json`,
	setup: func(fs *flag.FlagSet) action {
		dot := fs.String("dot", "", "also write the e-graph as Graphviz dot to `OUT.dot`")
		asJSON := fs.Bool("json", false, "print the report as one JSON object")
		return func(ctx context.Context, pos []string, stdout io.Writer) error {
			switch len(pos) {
			case 0:
				return usagef("missing FILE.json")
			case 1:
			default:
				return usagef("want one FILE.json, got %d arguments: %s", len(pos), strings.Join(pos, " "))
			}
			sum, err := egraph.SummarizeFile(ctx, pos[0], *dot)
			if err != nil {
				return err
			}
			if *asJSON {
				return writeIndentedJSON(stdout, sum)
			}
			return sum.WriteText(stdout)
		}
	},
}

// writeIndentedJSON prints v as one indented JSON object, as --json asks.
func writeIndentedJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
