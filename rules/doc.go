// Package rules owns the tensor e-graph and the rules that saturate it: the
// encoding of ir ops as e-nodes (an op's attributes interned into the
// e-node's payload), the tensor analysis (shape, dtype, known constant
// value, depends-only-on-weights), building the e-graph of an ir graph and
// turning an extraction back into one, the rule language of .rules files,
// and the rule verifier.
//
// It imports egraph, ir and extract.
package rules
