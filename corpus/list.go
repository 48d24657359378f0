package corpus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Entry is one graph of a Listing: its name and size, or why it was not
// built.
type Entry struct {
	Name   string `json:"name"`
	Ops    int    `json:"ops"`
	Params int64  `json:"params"`
	// Skipped says why the graph was not built (a length beyond its
	// model's positions); Ops and Params are then zero.
	Skipped string `json:"skipped,omitempty"`
}

// Listing is every registered graph with its size, in the order of Names:
// what "lumsearch corpus list" prints, as a table (WriteText) or as one
// JSON array (WriteJSON).
type Listing []Entry

// List builds every registered graph with opt and records its size. A
// graph whose model has fewer positions than opt.Seq is listed as skipped,
// so that a long length lists the models that take it. It checks ctx
// before each graph.
func List(ctx context.Context, opt Options) (Listing, error) {
	var l Listing
	for _, name := range Names() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		g, err := Build(name, opt)
		var pe *PositionsError
		if errors.As(err, &pe) {
			l = append(l, Entry{Name: name, Skipped: fmt.Sprintf("only %d positions (%s)", pe.Max, pe.Key)})
			continue
		}
		if err != nil {
			return nil, err
		}
		l = append(l, Entry{Name: name, Ops: len(g.Nodes), Params: Params(g)})
	}
	return l, nil
}

// WriteText writes the listing as a table: a NAME, OPS, PARAMS header,
// then one line a graph with its parameters also in HumanCount form, or
// dashes and why it was skipped. No line ends in spaces.
func (l Listing) WriteText(w io.Writer) error {
	width := len("NAME")
	for _, e := range l {
		width = max(width, len(e.Name))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-*s  %6s  %11s\n", width, "NAME", "OPS", "PARAMS")
	for _, e := range l {
		line := fmt.Sprintf("%-*s  %6d  %11d  %s", width, e.Name, e.Ops, e.Params, HumanCount(e.Params))
		if e.Skipped != "" {
			line = fmt.Sprintf("%-*s  %6s  %11s  skipped: %s", width, e.Name, "-", "-", e.Skipped)
		}
		b.WriteString(strings.TrimRight(line, " ") + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the listing as one indented JSON array of Entry
// objects.
func (l Listing) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(l)
}

// HumanCount writes a parameter count the way model cards do: 124.4M,
// 8.03B, 1.5K; below a thousand it is empty.
func HumanCount(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fK", float64(n)/1e3)
	}
	return ""
}
