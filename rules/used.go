package rules

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/extract"
)

// RuleUse is a rule the extracted program depends on and how many of its
// unions (distinct union records) the program's choices rest on.
type RuleUse struct {
	Rule   string
	Unions int
}

// RulesUsed names the rules the extracted program depends on, from the
// e-graph's union provenance: for every class the solution computes, the
// rule unions on the path from the class's first node (the op the model
// had there, or the node a rule made the class with) to the node the
// solution chose, which is what made that node an alternative of the
// class, and the rule applications that added either node. A program of
// the graph's own nodes needs no rule. (A rule whose only part was to
// make a match of another rule possible, deeper in a term the program
// does not choose, is not found: the provenance records unions, not
// matches' dependencies.) The searched
// program of a model whose layers repeat is its pair's (Block.Pair): the
// copies replay that pair's choices. Sorted by unions, then name.
func (prog *Program) RulesUsed() ([]RuleUse, error) {
	src := prog
	if prog.Block != nil && prog.Block.Pair != nil {
		src = prog.Block.Pair
	}
	if src.EGraph == nil || src.Problem == nil || src.Solution == nil {
		return nil, nil
	}
	return rulesUsed(&src.EGraph.Graph, src.Problem, src.Solution)
}

// rulesUsed counts, per rule, the unions the solution's classes rest on:
// those between each class's first node and its chosen node, and those
// that ended the rule applications which added either node.
func rulesUsed(g *egraph.Graph, p *extract.Problem, sol *extract.Solution) ([]RuleUse, error) {
	needed, err := sol.Needed(p)
	if err != nil {
		return nil, err
	}
	ex := g.Explainer()
	count := map[string]int{}
	seen := map[int]bool{} // union records counted
	for _, ci := range needed {
		ni := sol.Choice[ci]
		if ni < 0 {
			continue
		}
		chosenNode := p.NodeIDs[ni]
		firstNode := chosenNode
		for _, n := range g.ClassNodes(g.Find(p.ClassIDs[ci])) {
			firstNode = min(firstNode, n)
		}
		ids, err := ex.Unions(g.NodeOrigin(firstNode), g.NodeOrigin(chosenNode))
		if err != nil {
			return nil, fmt.Errorf("internal error: the rules of class %d: %w", p.ClassIDs[ci], err)
		}
		for _, n := range []egraph.NodeID{firstNode, chosenNode} {
			if id, ok := g.MadeBy(n); ok {
				ids = append(ids, id)
			}
		}
		for _, id := range ids {
			if seen[id] {
				continue
			}
			seen[id] = true
			if r := g.UnionAt(id); r.Kind == egraph.ByRule {
				count[r.Reason]++
			}
		}
	}
	out := make([]RuleUse, 0, len(count))
	for name, n := range count {
		out = append(out, RuleUse{Rule: name, Unions: n})
	}
	slices.SortFunc(out, func(a, b RuleUse) int {
		return cmp.Or(cmp.Compare(b.Unions, a.Unions), cmp.Compare(a.Rule, b.Rule))
	})
	return out, nil
}
