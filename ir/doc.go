// Package ir is lumsearch's tensor language: dtypes, shapes, the primitive
// ops (unary and binary math, comparisons, one-axis reductions, views, cast,
// gather, iota, constants, inputs, weights and state buffers) and the few
// composite ops that fused or library kernels match (batched matmul,
// softmax, layer and RMS norm, attention); a graph builder with shape and
// dtype checking; a text format that prints and parses any graph; and the
// reference interpreter, the float64 truth every program is compared with
// through Tolerance.
//
// Graphs are explicit: binary ops take operands of equal shape, and the
// builder inserts the reshapes and expands that broadcasting implies, so
// that rewrite rules never have to reason about implicit broadcasting.
//
// The package imports nothing of the project.
package ir
