package egraph

// Analysis attaches data of type D to every e-class and keeps it correct as
// classes merge, in the manner of egg's e-class analyses: the data of a class
// is the Merge of Make over its nodes, and Modify may act on it (add a
// constant's node and union it in, for constant folding).
type Analysis[D any] interface {
	// Make computes the data one node gives its class. It may read the data
	// of the node's children with EGraph.Data and must not mutate the graph.
	Make(g *EGraph[D], n Node) D
	// Merge combines from into *to and reports which of the two values the
	// result differs from. It must be a join: commutative, associative,
	// idempotent, so that the data does not depend on the order of unions.
	Merge(to *D, from D) DidMerge
	// Modify is called after a class is created, merged or has its data
	// changed. It may add nodes and union classes; it must reach a fixed
	// point (adding what is already there changes nothing).
	Modify(g *EGraph[D], id ClassID)
}

// DidMerge reports which inputs of Merge the result differs from: To is the
// value that was in place, From the value merged in.
type DidMerge struct {
	To, From bool
}

// NoData is the data of e-graphs without an analysis.
type NoData struct{}

// NoAnalysis is the analysis that attaches nothing.
type NoAnalysis struct{}

// Make implements Analysis.
func (NoAnalysis) Make(*EGraph[NoData], Node) NoData { return NoData{} }

// Merge implements Analysis.
func (NoAnalysis) Merge(*NoData, NoData) DidMerge { return DidMerge{} }

// Modify implements Analysis.
func (NoAnalysis) Modify(*EGraph[NoData], ClassID) {}
