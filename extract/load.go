package extract

import (
	"fmt"
	"math"

	"github.com/lumsearch/lumsearch/egraph"
)

// FromFile reads an egraph-serialize JSON file and makes it a Problem, with
// the file's costs (egraph.CostOf), its root e-classes, and its names for
// classes in messages. Nodes the file marks subsumed cost +Inf, so no
// algorithm chooses them. A malformed file's error names the file and the
// JSON path of the problem. The Imported e-graph is returned so that
// callers can name chosen nodes by the file's ids (Imported.NodeName).
func FromFile(path string) (*Problem, *egraph.Imported, error) {
	s, err := egraph.ReadSerializedFile(path)
	if err != nil {
		return nil, nil, err // names the file and the JSON path
	}
	p, im, err := FromSerialized(s)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, im, nil
}

// FromSerialized is FromFile on a file already read.
func FromSerialized(s *egraph.Serialized) (*Problem, *egraph.Imported, error) {
	im, err := egraph.FromSerialized(s)
	if err != nil {
		return nil, nil, err
	}
	p, err := NewProblem(&im.Graph.Graph, im.Roots, ImportedCost(im), im.ClassName)
	if err != nil {
		return nil, nil, err
	}
	return p, im, nil
}

// ImportedCost is the cost function of an imported file: the file's cost,
// and +Inf for the nodes it marks subsumed.
func ImportedCost(im *egraph.Imported) CostFunc {
	return func(g *egraph.Graph, n egraph.NodeID) float64 {
		if im.Subsumed[n] {
			return math.Inf(1)
		}
		return egraph.CostOf(g.Node(n))
	}
}
