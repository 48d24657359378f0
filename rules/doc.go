// Package rules owns the tensor e-graph and the rules that saturate it: the
// encoding of ir ops as e-nodes (an op's attributes interned into the
// e-node's payload), the tensor analysis (shape, dtype, known constant
// value, depends-only-on-weights), kernel terms (kernel SPEC x1..xn) over
// canonical fused bodies and (proj i K) for multi-output kernels, Legal
// (the one place that says which bodies lowering accepts), building the
// e-graph of an ir graph and turning an extraction back into one, the rule
// language of .rules files and its verifier, the built-in rule sets
// (algebra and tile as files with Go appliers; lower and fuse in Go), the
// search of a model through one pair of its repeated blocks
// (SaturateModel), the checker that compares an extraction with its graph
// and names the rules behind a disagreement (CheckExtraction), and the
// statistics of a saturation.
//
// It imports egraph, ir, extract and cost.
package rules
