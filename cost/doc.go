// Package cost owns the estimates extraction minimises: what a kernel
// launch is predicted to cost. Today it holds the simple estimate (bytes
// moved at memory bandwidth plus a launch overhead), which stands until the
// hardware cost model, its calibration and the tuning database replace it.
//
// It imports nothing of lumsearch, so that every package that prices
// kernels can use it.
package cost
