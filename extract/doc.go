// Package extract turns a saturated e-graph into a program: it chooses one
// e-node per needed e-class so that the roots are computed at least cost.
// It owns the cost interface (a per-node cost, evaluated once; negative
// costs allowed), the executability fixpoint that every algorithm starts
// from, the checks every result passes, and the algorithms: exact tree
// cost (refusing an optimum unbounded below), greedy DAG cost in the style
// of extraction-gym's "faster greedy DAG" and never worse than that
// extractor, which it also implements as its source states it, exact DAG
// extraction with a lower bound, candidate sets, and seeded random
// extraction.
//
// It works on any e-graph of package egraph, and on egraph-serialize
// files as the files state their problem (FromFile: the file's own
// classes, identical nodes in different classes kept apart) or, on
// request, through a real e-graph (LoadOptions.Congruence). It imports
// egraph and nothing else of the project.
package extract
