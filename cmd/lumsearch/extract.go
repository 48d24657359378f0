package main

import (
	"context"
	"flag"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/lumsearch/lumsearch/extract"
)

// extractCommand extracts a program from an egraph-serialize file.
var extractCommand = &command{
	name:     "extract",
	summary:  "choose the cheapest program in an egraph-serialize JSON file",
	synopsis: "extract FILE.json [--algo tree|greedy-dag|faster-greedy-dag|exact] [--timeout 10s] [--json] [--nodes] [--congruence]",
	doc: `
Read FILE.json in the egraph-serialize format, with the file's e-classes
and node costs (negative ones included; nodes marked subsumed are never
chosen), and choose one e-node for each e-class the root e-classes need.
The problem solved is the file's own: two identical nodes in different
e-classes stay apart. --congruence loads the file into a real e-graph
instead, which merges such classes as congruence closure does: a different
problem when the file is not closed under congruence, whose costs are not
comparable with published ones.

--algo tree finds the least tree cost, where a shared subterm is paid each
time it is used; it is exact. --algo greedy-dag aims at the least DAG cost,
where each chosen e-class is paid once, greedily in the manner of
extraction-gym's "faster greedy DAG", and is never worse than that
extractor, which --algo faster-greedy-dag runs alone as its source states
it (its choices can form a cycle; that is an error). Tree and greedy DAG
take negative costs; a tree cost that is unbounded below (a cycle of
negative cost reachable from a root) is an error. --algo exact finds the least DAG cost
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
		algo := fs.String("algo", extract.AlgorithmGreedyDAG, "extraction `algorithm`: "+strings.Join(extract.Algorithms, ", "))
		timeout := fs.Duration("timeout", 10*time.Second, "stop extraction after `d` (0: no limit); exact then reports its best so far")
		asJSON := fs.Bool("json", false, "print the report as one JSON object")
		nodes := fs.Bool("nodes", false, "also list the chosen e-nodes")
		congruence := fs.Bool("congruence", false, "load the file into an e-graph, merging e-classes that hold identical nodes")
		return func(ctx context.Context, pos []string, stdout io.Writer) error {
			switch len(pos) {
			case 0:
				return usagef("missing FILE.json")
			case 1:
			default:
				return usagef("want one FILE.json, got %d arguments: %s", len(pos), strings.Join(pos, " "))
			}
			if !slices.Contains(extract.Algorithms, *algo) {
				return usagef("unknown --algo %q; want %s", *algo, strings.Join(extract.Algorithms, ", "))
			}
			if *timeout < 0 {
				return usagef("--timeout must not be negative, got %v", *timeout)
			}
			rep, err := extract.RunFile(ctx, pos[0], extract.FileOptions{Algorithm: *algo, Timeout: *timeout, Nodes: *nodes, Load: extract.LoadOptions{Congruence: *congruence}})
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
