package egraph

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// FileSummary describes an egraph-serialize file once built into an
// e-graph and rebuilt: its sizes, its root e-classes under the file's names
// for them, its distinct operators, and how long reading and building
// took. It is what "lumsearch egraph" prints, as text (WriteText) or as
// JSON; the field order is the JSON object's.
type FileSummary struct {
	// File is the path the e-graph was read from.
	File string `json:"file"`
	// EClasses and ENodes are the sizes after rebuilding.
	EClasses int `json:"eclasses"`
	ENodes   int `json:"enodes"`
	// Roots names the root e-classes as the file names them, or eN for a
	// class the file leaves unnamed.
	Roots []string `json:"roots"`
	// Operators is the number of distinct operator symbols.
	Operators int `json:"operators"`
	// LoadSeconds is LoadTime in seconds.
	LoadSeconds float64 `json:"load_seconds"`
	// Dot is the Graphviz file written beside the summary, if any.
	Dot string `json:"dot,omitempty"`

	// LoadTime is how long reading and building took.
	LoadTime time.Duration `json:"-"`
}

// SummarizeFile reads the egraph-serialize file at path, builds it into an
// e-graph, rebuilds it and summarises it. When dotPath is not empty it
// also draws the e-graph there (WriteDotFile) and names it in the summary.
// Errors name the file; ctx is checked before and after loading.
func SummarizeFile(ctx context.Context, path, dotPath string) (*FileSummary, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	start := time.Now()
	s, err := ReadSerializedFile(path)
	if err != nil {
		return nil, fmt.Errorf("read e-graph: %w", err) // the error names the file
	}
	im, err := FromSerialized(s)
	if err != nil {
		return nil, fmt.Errorf("build e-graph from %s: %w", path, err)
	}
	load := time.Since(start)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sum := Summarize(path, im, load)
	if dotPath != "" {
		if err := WriteDotFile(dotPath, &im.Graph.Graph); err != nil {
			return nil, err
		}
		sum.Dot = dotPath
	}
	return sum, nil
}

// Summarize counts what a FileSummary shows of an imported e-graph read
// from path in time load.
func Summarize(path string, im *Imported, load time.Duration) *FileSummary {
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
	return &FileSummary{
		File:        path,
		EClasses:    g.NumClasses(),
		ENodes:      g.NumNodes(),
		Roots:       roots,
		Operators:   len(ops),
		LoadSeconds: load.Seconds(),
		LoadTime:    load,
	}
}

// maxRootsShown bounds the root names WriteText lists.
const maxRootsShown = 10

// WriteText writes the summary as "name: value" lines with the values
// aligned, listing at most ten root names.
func (s *FileSummary) WriteText(w io.Writer) error {
	names := make([]string, len(s.Roots))
	for i, n := range s.Roots {
		names[i] = QuoteName(n)
	}
	if len(names) > maxRootsShown {
		names = append(names[:maxRootsShown], fmt.Sprintf("... %d more", len(s.Roots)-maxRootsShown))
	}
	roots := fmt.Sprint(len(s.Roots))
	if len(names) > 0 {
		roots += " (" + strings.Join(names, ", ") + ")"
	}
	lines := [][2]string{
		{"file", s.File},
		{"e-classes", fmt.Sprint(s.EClasses)},
		{"e-nodes", fmt.Sprint(s.ENodes)},
		{"roots", roots},
		{"operators", fmt.Sprint(s.Operators)},
		{"load time", s.LoadTime.Round(time.Microsecond).String()},
	}
	if s.Dot != "" {
		lines = append(lines, [2]string{"dot", s.Dot})
	}
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "%-10s %s\n", l[0]+":", l[1])
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// QuoteName quotes a file's name for a class or node (Go syntax) when it
// is empty or would be ambiguous in a comma-separated list, and returns it
// unchanged otherwise.
func QuoteName(s string) string {
	if s == "" || strings.ContainsAny(s, " ,()\"\t\n") {
		return fmt.Sprintf("%q", s)
	}
	return s
}

// WriteDotFile draws g to path in Graphviz dot, labelling each e-node with
// its operator. The drawing is made in memory first, so an e-graph that
// WriteDot refuses leaves no file.
func WriteDotFile(path string, g *Graph) error {
	var buf bytes.Buffer
	opt := DotOptions{Label: func(n Node) string { return n.Op.String() }}
	if err := WriteDot(&buf, g, opt); err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write dot: %w", err)
	}
	return nil
}
