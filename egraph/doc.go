// Package egraph is lumsearch's e-graph engine: hash-consed e-nodes over a
// union-find of e-classes, deferred rebuilding (unions only queue work;
// Rebuild restores congruence closure once per iteration), user-supplied
// e-class analyses, union provenance, s-expression patterns compiled into an
// e-matching virtual machine, multi-patterns, conditional and Go-coded
// rewrites, and a runner with iteration, e-node, time and context limits and
// a backoff scheduler. It also reads and writes the egraph-serialize JSON
// format and exports Graphviz dot.
//
// The package is generic over the language: an e-node is an interned operator
// symbol, an optional 64-bit payload and the ids of its children's e-classes.
// It knows nothing about tensors and imports nothing of the project.
//
// The design follows egg (Willsey et al., "egg: Fast and Extensible Equality
// Saturation", POPL 2021): rebuilding, analyses and the backoff scheduler are
// egg's; the matcher is the e-matching machine of de Moura and Bjørner,
// "Efficient E-matching for SMT Solvers" (CADE 2007), as egg compiles it.
//
// Determinism: nothing that affects the result depends on map iteration order
// or goroutine timing. Classes are visited in id order, class nodes are kept
// sorted, and parallel searches are merged in rule order, so the same input
// and rules give the same e-graph, class ids included.
package egraph
