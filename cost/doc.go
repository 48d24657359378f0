// Package cost owns what extraction minimises: the predicted time of a
// kernel on a device.
//
//   - Device descriptions (devices.json, embedded; users add their own
//     files): multiprocessors, memory, caches, limits and the peak rate of
//     each instruction class and dtype with the fraction kernels achieve and
//     where that comes from. --target picks one; auto asks the GPU present.
//   - The kernel forms (FormOf, forms.go): which form the CUDA printer
//     prints a kernel body in (elementwise, row, matmul, attention) and
//     the structure each needs, or why no form computes the body. It is
//     the one legality oracle: rules.Legal admits nothing it refuses, the
//     model below prices the form it names and nothing it refuses, and
//     the printer prints by it. Decompose writes the composite ops as the
//     kernels compute them.
//   - The kernel cost model (Model): from a kernel body (a canonical
//     kernel SPEC) and a schedule, the features the schedule implies
//     (DRAM bytes with the re-reads its tiling causes, arithmetic per
//     instruction class with fused producers recomputed per tile, grid size
//     and occupancy), predicted with the device's efficiency factors
//     (Predict); a kernel costs its best schedule, measured times override
//     predictions, and results are cached per body.
//   - Calibration (Fit, CrossCheck; Calibrate from a tuning database): the
//     efficiency factors fitted to measured records by robust least squares,
//     saved as a profile.
//   - The simple estimate (Simple): bytes moved plus launches, for
//     comparison and for callers without a device.
//
// Measured times live in the tuning database (package tunedb). The package
// imports ir and tunedb only, so that rules and the search can price kernels.
package cost
