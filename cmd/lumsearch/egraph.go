package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

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
			return runEgraph(ctx, pos[0], *dot, *asJSON, stdout)
		}
	},
}

// egraphReport is what the egraph command prints, in text or as JSON.
type egraphReport struct {
	File        string   `json:"file"`
	EClasses    int      `json:"eclasses"`
	ENodes      int      `json:"enodes"`
	Roots       []string `json:"roots"`
	Operators   int      `json:"operators"`
	LoadSeconds float64  `json:"load_seconds"`
	Dot         string   `json:"dot,omitempty"`

	loadTime time.Duration
}

// runEgraph does the egraph command's work.
func runEgraph(ctx context.Context, path, dotPath string, asJSON bool, stdout io.Writer) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	start := time.Now()
	s, err := egraph.ReadSerializedFile(path)
	if err != nil {
		return fmt.Errorf("read e-graph: %w", err) // the error names the file
	}
	im, err := egraph.FromSerialized(s)
	if err != nil {
		return fmt.Errorf("build e-graph from %s: %w", path, err)
	}
	load := time.Since(start)
	if err := ctx.Err(); err != nil {
		return err
	}

	rep := summarize(path, im, load)
	if dotPath != "" {
		if err := writeDotFile(dotPath, im.Graph); err != nil {
			return err
		}
		rep.Dot = dotPath
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return rep.writeText(stdout)
}

// summarize counts what the report shows.
func summarize(path string, im *egraph.Imported, load time.Duration) *egraphReport {
	g := im.Graph
	ops := make(map[string]bool)
	for _, c := range g.Classes() {
		for _, nid := range g.ClassNodes(c) {
			ops[g.Node(nid).Op.String()] = true
		}
	}
	roots := make([]string, len(im.Roots))
	for i, r := range im.Roots {
		if name, ok := im.ClassName[r]; ok {
			roots[i] = name
		} else {
			roots[i] = fmt.Sprintf("e%d", r)
		}
	}
	return &egraphReport{
		File:        path,
		EClasses:    g.NumClasses(),
		ENodes:      g.NumNodes(),
		Roots:       roots,
		Operators:   len(ops),
		LoadSeconds: load.Seconds(),
		loadTime:    load,
	}
}

// maxRootsShown bounds the root names the text report lists.
const maxRootsShown = 10

// writeText prints the report as aligned lines.
func (r *egraphReport) writeText(w io.Writer) error {
	names := make([]string, len(r.Roots))
	for i, n := range r.Roots {
		names[i] = quoteIfNeeded(n)
	}
	if len(names) > maxRootsShown {
		names = append(names[:maxRootsShown], fmt.Sprintf("... %d more", len(r.Roots)-maxRootsShown))
	}
	roots := fmt.Sprint(len(r.Roots))
	if len(names) > 0 {
		roots += " (" + strings.Join(names, ", ") + ")"
	}
	lines := [][2]string{
		{"file", r.File},
		{"e-classes", fmt.Sprint(r.EClasses)},
		{"e-nodes", fmt.Sprint(r.ENodes)},
		{"roots", roots},
		{"operators", fmt.Sprint(r.Operators)},
		{"load time", r.loadTime.Round(time.Microsecond).String()},
	}
	if r.Dot != "" {
		lines = append(lines, [2]string{"dot", r.Dot})
	}
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "%-10s %s\n", l[0]+":", l[1])
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// quoteIfNeeded quotes a file's class name when it is empty or would be
// ambiguous in a comma-separated list.
func quoteIfNeeded(s string) string {
	if s == "" || strings.ContainsAny(s, " ,()\"\t\n") {
		return fmt.Sprintf("%q", s)
	}
	return s
}

// writeDotFile draws g to path, labelling each e-node with its operator. The
// drawing is made in memory first, so a refused e-graph leaves no file.
func writeDotFile(path string, g *egraph.EGraph[egraph.NoData]) error {
	var buf bytes.Buffer
	opt := egraph.DotOptions{Label: func(n egraph.Node) string { return n.Op.String() }}
	if err := egraph.WriteDot(&buf, &g.Graph, opt); err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write dot: %w", err)
	}
	return nil
}
