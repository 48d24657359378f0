package rules

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"slices"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/extract"
)

// Reextract extracts prog's e-graph again under price (say, the cost
// model once new measurements override its predictions), returning a new
// Program that shares the e-graph and the saturation's reports.
func (prog *Program) Reextract(ctx context.Context, price func(*egraph.EGraph[Data]) extract.CostFunc) (*Program, error) {
	np := *prog
	np.List = nil
	name := "program"
	if prog.Graph != nil {
		name = prog.Graph.Name
	}
	if err := np.extract(ctx, name, price); err != nil {
		return nil, err
	}
	return &np, nil
}

// SetsHash identifies the rule sets this build runs: the SHA-256, in hex,
// of every built-in rule file's name and text, and of the names of the
// sets written in Go (whose identity is the build's version).
func SetsHash() (string, error) {
	h := sha256.New()
	files, err := fs.Glob(builtin, "builtin/*.rules")
	if err != nil {
		return "", err
	}
	slices.Sort(files)
	for _, f := range files {
		data, err := fs.ReadFile(builtin, f)
		if err != nil {
			return "", fmt.Errorf("rule sets: %w", err)
		}
		fmt.Fprintf(h, "file %s %d\n", f, len(data))
		h.Write(data)
	}
	for _, s := range Sets() {
		fmt.Fprintf(h, "set %s\n", s)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
