package search

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/gogen"
	"github.com/lumsearch/lumsearch/internal/outdir"
	"github.com/lumsearch/lumsearch/plan"
	"github.com/lumsearch/lumsearch/report"
)

// readPlan reads an output folder's plan.json and checks it against its
// own digest.
func readPlan(dir string) (*plan.Plan, error) {
	p := filepath.Join(dir, plan.FileName)
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, withKind(KindInput, fmt.Errorf("%s: %w", dir, err))
	}
	pl, err := plan.Parse(p, data)
	if err != nil {
		return nil, withKind(KindInput, err)
	}
	if err := plan.CheckSeal(p, data); err != nil {
		return nil, err
	}
	return pl, nil
}

// reportFile says whether a folder's file belongs to the report, which
// plan.json does not cover (it holds wall times and is for people).
func reportFile(rel string) bool {
	return rel == plan.FileName || rel == report.FileName || rel == report.AssetsDir || strings.HasPrefix(rel, report.AssetsDir+"/")
}

// checkFiles checks that dir holds exactly the files pl lists, each with
// its digest, and that the copies of the program in it agree: the PTX
// and CUBIN model.cpp embeds are the Go package's, and the Go package's
// plan and constants are the folder's.
func checkFiles(dir string, pl *plan.Plan) error {
	if len(pl.Files) == 0 {
		return fmt.Errorf("%s: plan.json lists no files: it is a copy of a plan, not an output folder's", dir)
	}
	files, err := outdir.Walk(dir, reportFile)
	if err != nil {
		return err
	}
	var problems []string
	for _, rel := range files {
		want, ok := pl.Files[rel]
		if !ok {
			problems = append(problems, rel+" was added")
			continue
		}
		got, err := outdir.DigestFile(filepath.Join(dir, filepath.FromSlash(rel)))
		if err != nil {
			return err
		}
		if got != want {
			problems = append(problems, fmt.Sprintf("%s was changed (%s, written as %s)", rel, got, want))
		}
	}
	for _, rel := range slices.Sorted(maps.Keys(pl.Files)) {
		if !slices.Contains(files, rel) {
			problems = append(problems, rel+" is missing")
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s is not the folder lumsearch wrote: %s; compile again rather than edit an output folder", dir, strings.Join(problems, "; "))
	}
	return checkCopies(dir, pl)
}

// checkCopies checks that the folder's copies of the program agree.
func checkCopies(dir string, pl *plan.Plan) error {
	read := func(rel string) ([]byte, error) {
		return os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
	}
	library, err := read(LibraryFile)
	if err != nil {
		return err
	}
	ptx, cubin, err := cuda.EmbeddedModule(string(library))
	if err != nil {
		return fmt.Errorf("%s: %w", LibraryFile, err)
	}
	if (ptx == "") != (pl.NVRTC == nil) {
		return fmt.Errorf("%s: plan.json and %s disagree on whether NVRTC compiled the kernels", dir, LibraryFile)
	}
	consts, err := read(plan.ConstantsFile)
	if err != nil {
		return err
	}
	copyPlan := *pl
	copyPlan.Files, copyPlan.Digest = nil, ""
	planCopy, err := copyPlan.Encode()
	if err != nil {
		return err
	}
	for _, goDir := range goPackages(pl) {
		for _, want := range []struct {
			file string
			data []byte
		}{
			{gogen.PTXFile, []byte(ptx)},
			{gogen.CUBINFile, cubin},
			{plan.FileName, planCopy},
			{plan.ConstantsFile, consts},
		} {
			rel := path.Join(goDir, want.file)
			got, err := read(rel)
			if err != nil {
				return err
			}
			if !bytes.Equal(got, want.data) {
				return fmt.Errorf("%s: %s is not what %s", dir, rel, map[string]string{
					gogen.PTXFile: LibraryFile + " embeds", gogen.CUBINFile: LibraryFile + " embeds",
					plan.FileName: plan.FileName + " holds", plan.ConstantsFile: plan.ConstantsFile + " holds"}[want.file])
			}
		}
	}
	return nil
}

// goPackages are the folders of the Go packages plan.json lists.
func goPackages(pl *plan.Plan) []string {
	var dirs []string
	for rel := range pl.Files {
		if strings.HasPrefix(rel, "go/") && path.Base(rel) == gogen.SourceFile {
			dirs = append(dirs, path.Dir(rel))
		}
	}
	slices.Sort(dirs)
	return dirs
}

// checkCompiled checks the folder's PTX and CUBIN against what NVRTC
// compiles its kernels.cu to now, when the NVRTC here is the version
// that compiled them; else it says what it could not check.
func checkCompiled(ctx context.Context, dir string, pl *plan.Plan, src []byte, log io.Writer) error {
	if pl.NVRTC == nil {
		fmt.Fprintf(log, "  kernels: compiled without NVRTC; the folder embeds no PTX or CUBIN\n")
		return nil
	}
	lib, err := loadNVRTC()
	if err != nil {
		fmt.Fprintf(log, "  kernels: no NVRTC here (%v): the PTX and CUBIN are checked by their digests and copies only, not compiled again\n", err)
		return nil
	}
	major, minor := lib.Version()
	if v := fmt.Sprintf("%d.%d", major, minor); v != pl.NVRTC.Version {
		fmt.Fprintf(log, "  kernels: NVRTC %s here, the folder was compiled by NVRTC %s: the PTX and CUBIN are checked by their digests and copies only, not compiled again\n", v, pl.NVRTC.Version)
		return nil
	}
	library, err := os.ReadFile(filepath.Join(dir, LibraryFile))
	if err != nil {
		return err
	}
	ptx, cubin, err := cuda.EmbeddedModule(string(library))
	if err != nil {
		return fmt.Errorf("%s: %w", LibraryFile, err)
	}
	// NVRTC was seen (rarely) to give another PTX for the same source
	// (see nvrtc.Compile): a mismatch is compiled again before it fails.
	// A forged module matches no compilation.
	const attempts = 3
	var mismatch string
	for range attempts {
		res, err := lib.Compile(ctx, string(src), KernelsFile, nvrtc.Options{Arch: pl.Arch})
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("%s: NVRTC %s does not compile %s: %w", dir, pl.NVRTC.Version, KernelsFile, err)
		}
		if !slices.Equal(res.Options, pl.NVRTC.Options) {
			fmt.Fprintf(log, "  kernels: the folder was compiled with NVRTC options %q, this lumsearch compiles with %q: the PTX and CUBIN are checked by their digests and copies only\n", pl.NVRTC.Options, res.Options)
			return nil
		}
		switch {
		case ptx != res.PTX:
			mismatch = "PTX"
		case !bytes.Equal(cubin, res.CUBIN):
			mismatch = "CUBIN"
		default:
			mismatch = ""
		}
		if mismatch == "" {
			break
		}
	}
	if mismatch != "" {
		return fmt.Errorf("%s: the %s in %s is not what NVRTC %s compiles %s to (%d compilations)", dir, mismatch, LibraryFile, pl.NVRTC.Version, KernelsFile, attempts)
	}
	fmt.Fprintf(log, "  kernels: the PTX and CUBIN in %s and go/ are what NVRTC %s compiles %s to\n", LibraryFile, pl.NVRTC.Version, KernelsFile)
	return nil
}
