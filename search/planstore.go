package search

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/plan"
	"github.com/lumsearch/lumsearch/rules"
)

// The tuning database keeps, beside its records, the plan of each model's
// last optimize run, so that the next run of the same model starts from it
// and is never predicted slower (DESIGN.md: a tuning database makes the
// next run incremental).

// planStoreKey names a model's plan in the store: everything that makes
// the same program mean the same thing (model, build options, target,
// architecture, rules), but not the budget or limits, which only decide
// how far the search gets.
func planStoreKey(md *Model, o Options, sel *ruleSelection) string {
	rulesHash, _ := rules.SetsHash()
	h := sha256.New()
	fmt.Fprintf(h, "lumsearch plan store 3\nmodel %s\nbuild %+v\nkind %s\ndims %s\nsymbols %v\nexpect %s\ntarget %s\narch %s\nrules %s\n",
		md.Name, md.Options.Build, md.Options.Kind, md.Options.Dims, md.Graph.Symbols, DimFlag{Ranges: o.Expect}, o.Target, o.Arch, rulesHash)
	if sel != nil && sel.changed() {
		// A selection of its own keeps its own plan: the built-in sets'
		// program is not what a user's rules produced.
		fmt.Fprintf(h, "selection %s\n", sel.key())
	}
	return hex.EncodeToString(h.Sum(nil))
}

// planStoreDir is the folder of kept plans beside the tuning database.
func planStoreDir(dbPath string) (string, error) {
	dbPath, err := tuneDBPath(dbPath)
	if err != nil {
		return "", err
	}
	return dbPath + ".plans", nil
}

// previousPlan returns the kept plan of this model and options as a
// candidate, printed in the schedules the cost model ranks first now and
// priced as the search prices its own; nil when there is none.
func previousPlan(dbPath, key string, md *Model, m *cost.Model) (*Candidate, error) {
	model, g := md.Name, md.Graph
	dir, err := planStoreDir(dbPath)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(dir, key+".json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	pl, err := plan.Parse(key, data)
	if err != nil {
		return nil, err
	}
	lp, err := pl.Lowered(model)
	if err != nil {
		return nil, err
	}
	if err := matchesModel(g, lp); err != nil {
		return nil, fmt.Errorf("it does not fit %s: %w", model, err)
	}
	ks, err := cuda.PrintProgramWith(lp, m.Ranked)
	if err != nil {
		return nil, err
	}
	c := &compiled{lowered: lp, kernels: ks}
	return &Candidate{Stage: "previous run", Prepared: c, Cost: runCost(c)}, nil
}

// storePlan keeps a verified plan for the next run, replacing the file
// atomically so that a killed run leaves the old one whole.
func storePlan(dbPath, key string, pl *plan.Plan) error {
	dir, err := planStoreDir(dbPath)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := pl.Encode()
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, key+".*.tmp")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(data)
	if err := errors.Join(werr, tmp.Close()); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, key+".json"))
}

// tuneDBHash is the SHA-256 of the tuning database's file ("" when there
// is none).
func tuneDBHash(path string) string {
	path, err := tuneDBPath(path)
	if err != nil {
		return ""
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
