package search

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"time"

	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/gogen"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/plan"
	"github.com/lumsearch/lumsearch/safetensors"
)

// The files of an output folder besides plan.json and the report.
const (
	// KernelsFile is the CUDA source: the NVRTC prelude and every kernel.
	KernelsFile = "kernels.cu"
	// HeaderFile and LibraryFile are the host library (a C API over the
	// CUDA driver, loaded at run time, embedding the PTX and CUBIN).
	HeaderFile  = "model.h"
	LibraryFile = "model.cpp"
	// WeightsFile is the prepared weights of a model that comes with
	// weights: those its run reads and those computed from them at load.
	WeightsFile = "weights.safetensors"
)

// The metadata keys of the prepared weights file besides the program
// digest (lower.DigestMetadataKey), which the host library checks.
const (
	versionMetadataKey = "lumsearch.version"
	modelMetadataKey   = "lumsearch.model"
)

// CheckOutputDir makes sure dir exists (creating it) and takes files, so
// that a run learns that its output folder is unusable before the search,
// not after. The error is KindOutput.
func CheckOutputDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return withKind(KindOutput, fmt.Errorf("output folder %s: %w", dir, err))
	}
	f, err := os.CreateTemp(dir, ".lumsearch-probe-*")
	if err != nil {
		return withKind(KindOutput, fmt.Errorf("output folder %s cannot be written: %w", dir, err))
	}
	name := f.Name()
	return withKind(KindOutput, errors.Join(f.Close(), os.Remove(name)))
}

// buildPlan makes a final program's plan.json with where it came from.
func buildPlan(src *source, f *final) (*plan.Plan, error) {
	md := src.model
	pl, err := plan.Build(f.lowered, f.kernels, f.resources, src.m)
	if err != nil {
		return nil, fmt.Errorf("compile %s: %w", md.Name, err)
	}
	pl.Version, pl.Model, pl.Target, pl.Arch = Version(), md.Name, src.m.Device.Name, src.arch
	b := md.Options.Build
	pl.Options = plan.Options{Seq: b.Seq, Past: b.Past, DType: b.DType.String(), Dims: maps.Clone(md.Options.Dims)}
	return pl, nil
}

// Write writes the result's output folder dir (created if missing):
// kernels.cu, the host library (model.h, model.cpp), plan.json, the
// constants, the model's Go package in go/NAME and, for a model with
// weights, the prepared weights; from Optimize also report.md with its
// charts in report/, after keeping the plan for the model's next run. It
// reports on the result's events as it goes. The error is KindOutput.
func (r *Result) Write(ctx context.Context, dir string) error {
	if r.Report != nil {
		r.em.send(Event{Kind: "phase", Phase: "write", Elapsed: time.Since(r.start).Seconds()})
	}
	if err := r.writeProgram(ctx, dir); err != nil {
		return withKind(KindOutput, err)
	}
	if r.Report == nil {
		return nil
	}
	if r.keep != nil {
		if err := r.keep(r.Plan); err != nil {
			r.em.logf("  note: the plan was not kept for the next run: %v", err)
		}
	}
	if r.Report.Budget > 0 {
		r.Report.Elapsed = time.Since(r.start)
	}
	return withKind(KindOutput, r.Report.WriteFiles(dir))
}

// writeProgram writes everything but the report.
func (r *Result) writeProgram(ctx context.Context, dir string) error {
	model, f, pl := r.Model.Name, r.final, r.Plan
	lp := f.lowered
	log := newLogWriter(r.em)
	header, library, err := cuda.HostLibrary(lp, f.kernels, f.ptx, f.cubin, r.src.arch)
	if err != nil {
		return fmt.Errorf("compile %s: %w", model, err)
	}
	if f.ptx == "" {
		fmt.Fprintf(log, "  host library: no kernels embedded (NVRTC is missing): its lum_create fails until the model is compiled where libnvrtc is installed\n")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("output folder: %w", err)
	}
	for _, file := range [][2]string{{KernelsFile, f.src}, {HeaderFile, header}, {LibraryFile, library}} {
		if err := os.WriteFile(filepath.Join(dir, file[0]), []byte(file[1]), 0o644); err != nil {
			return fmt.Errorf("output folder: %w", err)
		}
	}
	if err := pl.Write(dir); err != nil {
		return fmt.Errorf("compile %s: %w", model, err)
	}
	consts, err := plan.Constants(ctx, lp)
	if err != nil {
		return fmt.Errorf("compile %s: %w", model, err)
	}
	constData, err := safetensors.Encode(consts, map[string]string{versionMetadataKey: Version()})
	if err != nil {
		return fmt.Errorf("compile %s: %w", model, err)
	}
	if err := os.WriteFile(filepath.Join(dir, plan.ConstantsFile), constData, 0o644); err != nil {
		return fmt.Errorf("output folder: %w", err)
	}
	goDir := filepath.Join(dir, "go", gogen.PackageName(model))
	pkgName, err := gogen.Write(goDir, gogen.Package{Plan: pl, PTX: f.ptx, CUBIN: f.cubin, Constants: constData})
	if err != nil {
		return fmt.Errorf("compile %s: %w", model, err)
	}
	fmt.Fprintf(log, "  go package: %s in %s (embeds the plan, kernels and constants; runs through lumsearch's gpu runtime)\n", pkgName, goDir)
	if r.Model.Weights != nil {
		if err := writePreparedWeights(ctx, model, dir, lp, r.Model.Weights, log); err != nil {
			return fmt.Errorf("compile %s: %w", model, err)
		}
	}
	return nil
}

// writePreparedWeights writes DIR/weights.safetensors for the lowered
// program lp of model: the weights its run reads and the weights prepared
// from them at load time (lower.PrepareWeights), with lumsearch's version,
// the model's name and the program's digest as metadata. The host
// library's lum_load_prepared loads it in place of lum_load_weights and
// lum_prepare. DIR must exist.
func writePreparedWeights(ctx context.Context, model, dir string, lp *lower.Program, weights map[string]*ir.Tensor, log io.Writer) error {
	stored, err := lower.PrepareWeights(ctx, lp, weights)
	if err != nil {
		return err
	}
	digest, err := lower.WeightsDigest(lp)
	if err != nil {
		return err
	}
	name := lp.Name
	if name == "" {
		name = filepath.Base(model)
	}
	meta := map[string]string{versionMetadataKey: Version(), modelMetadataKey: name, lower.DigestMetadataKey: digest}
	path := filepath.Join(dir, WeightsFile)
	if err := safetensors.WriteFile(path, stored, meta); err != nil {
		return err
	}
	bufs, err := lower.StoredBuffers(lp)
	if err != nil {
		return err
	}
	var nw, np int
	var bytes int64
	for _, b := range bufs {
		if b.Kind == lower.Weight {
			nw++
		} else {
			np++
		}
		bytes += b.Bytes
	}
	fmt.Fprintf(log, "  prepared weights: %d weights and %d computed at load, %d bytes, in %s (lum_load_prepared loads them)\n",
		nw, np, bytes, path)
	return nil
}
