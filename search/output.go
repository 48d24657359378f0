package search

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/gogen"
	"github.com/lumsearch/lumsearch/internal/outdir"
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

// CheckOutputDir makes sure that dir can take the output before the
// search, so that a run learns that its output folder is unusable first,
// not after: dir is missing, empty or written by lumsearch, and the
// folder it goes in takes files. It creates nothing. The error is
// KindOutput.
func CheckOutputDir(dir string) error {
	if err := outdir.Check(dir, outputOptions()); err != nil {
		return withKind(KindOutput, fmt.Errorf("output folder %s: %w", dir, err))
	}
	return nil
}

// outputOptions are how an output folder is replaced: only one
// lumsearch wrote, and with writeHook at every step (tests).
func outputOptions() outdir.Options {
	return outdir.Options{Owned: writtenByLumsearch, Hook: writeHook}
}

// writeHook, when set, is called at every step of writing an output
// folder; an error fails the write there. Tests inject faults with it.
var writeHook func(step string) error

// writtenByLumsearch accepts a folder whose plan.json lumsearch wrote: it
// parses as JSON and names the lumsearch version and the model, whatever
// its format (an older lumsearch's folder may be replaced).
func writtenByLumsearch(dir string) error {
	data, err := os.ReadFile(filepath.Join(dir, plan.FileName))
	if err != nil {
		return fmt.Errorf("%s is not empty and has no plan.json: it was not written by lumsearch, which replaces only folders it wrote (choose another -o)", dir)
	}
	var prov struct {
		Version string `json:"lumsearch_version"`
		Model   string `json:"model"`
	}
	if err := json.Unmarshal(data, &prov); err != nil || prov.Version == "" || prov.Model == "" {
		return fmt.Errorf("%s is not empty and its plan.json does not name a lumsearch version and model: it was not written by lumsearch, which replaces only folders it wrote (choose another -o)", dir)
	}
	return nil
}

// buildPlan makes a final program's plan.json with where it came from.
func buildPlan(src *source, f *final) (*plan.Plan, error) {
	md := src.model
	pl, err := plan.Build(f.lowered, f.kernels, f.resources, src.m)
	if err != nil {
		return nil, fmt.Errorf("compile %s: %w", md.Name, err)
	}
	pl.Version, pl.Model, pl.Target, pl.Arch = Version(), md.Name, src.m.Device.Name, src.arch
	pl.NVRTC = f.compiler
	if f.ptx != "" {
		// What each kernel's main loop issues, read from NVRTC's PTX: the
		// integer work per FMA a GPU-less reader checks first.
		for _, ls := range [][]plan.Launch{pl.Prep, pl.Run} {
			for i := range ls {
				if mix := cuda.LoopMix(f.ptx, ls[i].Kernel); mix.Total() > 0 {
					ls[i].Loop = &plan.Issue{Int: mix.Int, FP: mix.FP, Load: mix.Load, Shared: mix.Shared, Other: mix.Other}
				}
			}
		}
	}
	b := md.Options.Build
	pl.Options = plan.Options{Seq: b.Seq, Past: b.Past, DType: b.DType.String(), Dims: maps.Clone(md.Options.Dims)}
	if b.Past < 0 {
		pl.Options.PastMin, pl.Options.PastMax = b.PastMin, b.PastMax
	}
	if b.Cache != b.Seq {
		pl.Options.Cache = b.Cache
	}
	pl.Options.MaxSeq = b.MaxSeq
	if pl.Step != nil {
		so := b.Step
		pl.Options.Step = &plan.StepOptions{MaxTokens: so.MaxTokens, MaxSeqs: so.MaxSeqs, BlockSize: so.BlockSize, KVBlocks: so.KVBlocks, AllLogits: so.AllLogits}
	}

	return pl, nil
}

// Write writes the result's output folder dir: kernels.cu, the host
// library (model.h, model.cpp), plan.json, the constants, the model's Go
// package in go/NAME and, for a model with weights, the prepared
// weights; from Optimize also report.md with its charts in report/,
// after keeping the plan for the model's next run. plan.json records the
// digest of every other file but the report's, and its own.
//
// The folder is written whole beside dir and swapped into its place, so
// that dir holds either its old content or the new, never a mix, even
// when the process is killed; a write that fails leaves dir as it was.
// A dir that is not empty is replaced only when lumsearch wrote it. It
// reports on the result's events as it goes. The error is KindOutput.
func (r *Result) Write(ctx context.Context, dir string) error {
	if r.Report != nil {
		r.em.send(Event{Kind: "phase", Phase: "write", Elapsed: time.Since(r.start).Seconds()})
	}
	err := outdir.Replace(dir, outputOptions(), func(s *outdir.Stage) error {
		if err := r.writeProgram(ctx, dir, s); err != nil {
			return err
		}
		if r.Report == nil {
			return nil
		}
		if r.Report.Budget > 0 {
			r.Report.Elapsed = time.Since(r.start)
		}
		if err := s.Step("report"); err != nil {
			return err
		}
		return r.Report.WriteFiles(s.Dir())
	})
	if err != nil {
		return withKind(KindOutput, fmt.Errorf("output folder %s: %w", dir, err))
	}
	if r.keep != nil {
		if err := r.keep(r.Plan); err != nil {
			r.em.logf("  note: the plan was not kept for the next run: %v", err)
		}
	}
	return nil
}

// writeProgram writes everything but the report into the stage of dir,
// plan.json last, with the digests of the others.
func (r *Result) writeProgram(ctx context.Context, dir string, s *outdir.Stage) error {
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
	src, err := modelSource(model, dir)
	if err != nil {
		return fmt.Errorf("compile %s: %w", model, err)
	}
	// The plan as the folder's copies embed it: without the folder's
	// digests, which cover those copies.
	pl.Source, pl.Files, pl.Digest = src, nil, ""
	for _, file := range [][2]string{{KernelsFile, f.src}, {HeaderFile, header}, {LibraryFile, library}} {
		if err := s.WriteFile(file[0], []byte(file[1])); err != nil {
			return err
		}
	}
	consts, err := plan.Constants(ctx, lp)
	if err != nil {
		return fmt.Errorf("compile %s: %w", model, err)
	}
	constData, err := safetensors.Encode(consts, map[string]string{versionMetadataKey: Version()})
	if err != nil {
		return fmt.Errorf("compile %s: %w", model, err)
	}
	if err := s.WriteFile(plan.ConstantsFile, constData); err != nil {
		return err
	}
	pkgName, files, err := gogen.Files(gogen.Package{Plan: pl, PTX: f.ptx, CUBIN: f.cubin, Constants: constData})
	if err != nil {
		return fmt.Errorf("compile %s: %w", model, err)
	}
	goDir := path.Join("go", pkgName)
	for _, gf := range files {
		if err := s.WriteFile(path.Join(goDir, gf.Name), gf.Data); err != nil {
			return err
		}
	}
	fmt.Fprintf(log, "  go package: %s in %s (embeds the plan, kernels and constants; runs through lumsearch's gpu runtime)\n", pkgName, filepath.Join(dir, filepath.FromSlash(goDir)))
	if r.Model.Weights != nil {
		if err := writePreparedWeights(ctx, model, s, lp, r.Model.Weights, log); err != nil {
			return fmt.Errorf("compile %s: %w", model, err)
		}
	}
	pl.Files = maps.Clone(s.Digests())
	sealed, err := pl.Seal()
	if err != nil {
		return fmt.Errorf("compile %s: %w", model, err)
	}
	// Through the stage like the others: its digest, recorded after
	// Files was taken, is in plan.json's own seal instead.
	return s.WriteFile(plan.FileName, sealed)
}

// writePreparedWeights writes DIR/weights.safetensors for the lowered
// program lp of model: the weights its run reads and the weights prepared
// from them at load time (lower.PrepareWeights), with lumsearch's version,
// the model's name and the program's digest as metadata. The host
// library's lum_load_prepared loads it in place of lum_load_weights and
// lum_prepare. DIR must exist.
func writePreparedWeights(ctx context.Context, model string, s *outdir.Stage, lp *lower.Program, weights map[string]*ir.Tensor, log io.Writer) error {
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
	w, err := s.Create(WeightsFile)
	if err != nil {
		return err
	}
	if err := safetensors.Write(w, stored, meta); err != nil {
		w.Close()
		return err
	}
	if err := w.Close(); err != nil {
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
		nw, np, bytes, WeightsFile)
	return nil
}
