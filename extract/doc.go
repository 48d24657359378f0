// Package extract turns a saturated e-graph into a program: it chooses one
// e-node per needed e-class so that the roots are computed at least cost.
// It owns the cost interface (a per-node cost, evaluated once), the
// executability fixpoint that every algorithm starts from, the checks every
// result passes, and the algorithms: exact tree cost, greedy DAG cost in
// the style of extraction-gym's "faster greedy DAG", exact DAG extraction
// with a lower bound, candidate sets, and seeded random extraction.
//
// It works on any e-graph of package egraph, and so on egraph-serialize
// files through egraph.FromSerialized. It imports egraph and nothing else
// of the project.
package extract
