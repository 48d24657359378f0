package main

import (
	"context"
	"flag"
	"io"
	"strings"
	"time"

	"github.com/lumsearch/lumsearch/extract"
)

// extractCommand extracts a program from an egraph-serialize file.
var extractCommand = &command{
	name:     "extract",
	summary:  "choose the cheapest program in an egraph-serialize JSON file",
	synopsis: "extract FILE.json [--algo tree|greedy-dag|exact] [--timeout 10s] [--json] [--nodes]",
	doc: `
Read FILE.json in the egraph-serialize format, with the file's node costs
(nodes marked subsumed are never chosen), and choose one e-node for each
e-class the root e-classes need.

--algo tree finds the least tree cost, where a shared subterm is paid each
time it is used; it is exact. --algo greedy-dag aims at the least DAG cost,
where each chosen e-class is paid once, greedily in the manner of
extraction-gym's "faster greedy DAG". --algo exact finds the least DAG cost
and proves it, starting from the greedy solution; it needs the cbc solver for
hard files, and when --timeout stops it first it reports the best solution
found, a lower bound and the gap between them.

The report gives the file, the algorithm, the DAG cost and the tree cost of
the chosen program (whichever the algorithm aimed at is listed first), the
number of e-classes it needs, and how long loading and extraction took. With
--nodes it also lists the chosen e-nodes by the file's node ids, children
before parents.`,
	example: `
lumsearch extract egraph/testdata/ac4.json
lumsearch extract egraph/testdata/ac4.json --algo tree --nodes
lumsearch extract FILE.json --algo exact --timeout 30s --json`,
	setup: func(fs *flag.FlagSet) action {
		algo := fs.String("algo", extract.AlgorithmGreedyDAG, "extraction `algorithm`: tree, greedy-dag or exact")
		timeout := fs.Duration("timeout", 10*time.Second, "stop extraction after `d` (0: no limit); exact then reports its best so far")
		asJSON := fs.Bool("json", false, "print the report as one JSON object")
		nodes := fs.Bool("nodes", false, "also list the chosen e-nodes")
		return func(ctx context.Context, pos []string, stdout io.Writer) error {
			switch len(pos) {
			case 0:
				return usagef("missing FILE.json")
			case 1:
			default:
				return usagef("want one FILE.json, got %d arguments: %s", len(pos), strings.Join(pos, " "))
			}
			switch *algo {
			case extract.AlgorithmTree, extract.AlgorithmGreedyDAG, extract.AlgorithmExact:
			default:
				return usagef("unknown --algo %q; want tree, greedy-dag or exact", *algo)
			}
			if *timeout < 0 {
				return usagef("--timeout must not be negative, got %v", *timeout)
			}
			rep, err := extract.RunFile(ctx, pos[0], extract.FileOptions{Algorithm: *algo, Timeout: *timeout, Nodes: *nodes})
			if err != nil {
				return err
			}
			if *asJSON {
				return writeIndentedJSON(stdout, rep)
			}
			return rep.WriteText(stdout)
		}
	},
}
