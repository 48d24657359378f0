// Package quant owns the quantized weight formats lumsearch reads: their
// element codes, their packings as checkpoints store them, the reference
// decoder that gives every packed element its value, and the packers that
// quantize float weights into each format. It is written from the
// formats' specifications (the OCP Microscaling Formats specification
// v1.0 for MXFP4's e2m1 elements and e8m0 scales, the OCP 8-bit Floating
// Point specification for e4m3) and the reference packers of AWQ and GPTQ,
// independently of the kernels that decode the same bytes on a GPU, so
// that the two can check each other.
//
// The package imports the standard library and x448/float16 (the f16 that
// AWQ quantizes in and AWQ and GPTQ store their scales in) only.
package quant
