package search

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/plan"
	"github.com/lumsearch/lumsearch/safetensors"
)

// folderProgram is the program a compiled output folder runs, as verify,
// run and bench read it: the plan's launches lowered again, the kernels
// of kernels.cu (each checked to be what its body and schedule print),
// the constants, and the name the model resolves to from the folder.
type folderProgram struct {
	pl     *plan.Plan
	lp     *lower.Program
	ks     []*cuda.Kernel
	consts map[string]*ir.Tensor
	model  string
}

// readKernelsFile reads dir's kernels.cu (a KindInput error when it cannot).
func readKernelsFile(dir string) (src []byte, path string, err error) {
	path = filepath.Join(dir, KernelsFile)
	src, err = os.ReadFile(path)
	if err != nil {
		return nil, path, withKind(KindInput, err)
	}
	return src, path, nil
}

// loadFolderProgram reads dir's program, pl being its plan (whose files
// were checked) and src its kernels.cu at srcPath. A folder that cannot
// be read is a KindInput error; a kernel that is not what its body prints
// is a plain one. Errors do not name dir: callers say what they were
// doing.
func loadFolderProgram(dir string, pl *plan.Plan, src []byte, srcPath string) (*folderProgram, error) {
	f := &folderProgram{pl: pl}
	var err error
	if f.model, err = resolveModel(dir, pl); err != nil {
		return nil, err
	}
	if f.consts, _, err = safetensors.ReadFile(filepath.Join(dir, plan.ConstantsFile)); err != nil {
		return nil, withKind(KindInput, err)
	}
	if f.lp, err = pl.Lowered(pl.Model); err != nil {
		return nil, withKind(KindInput, err)
	}
	if f.ks, err = reprint(pl, f.lp, string(src), srcPath); err != nil {
		return nil, err
	}
	return f, nil
}

// rebuild builds the model the plan's provenance names, with the build
// options it records, and checks that the program computes it (its
// inputs, weights, states and runtime extents). The caller closes it.
func (f *folderProgram) rebuild() (*Model, error) {
	md, err := LoadModel(f.model, ModelOptions{Build: planBuild(f.pl), Dims: Dims(f.pl.Options.Dims)})
	if err != nil {
		return nil, withKind(KindInput, fmt.Errorf("rebuild %s from plan.json: %w", f.pl.Model, err))
	}
	if err := matchesModel(md.Graph, f.lp); err != nil {
		md.Close()
		return nil, fmt.Errorf("the model %s as rebuilt from plan.json: %w", f.pl.Model, err)
	}
	return md, nil
}

// openFolder reads dir's plan, checks it with check (nil: no check) and
// the folder's files against their digests, loads its program and
// rebuilds its model, which the caller closes. Errors do not name dir:
// callers say what they were doing.
func openFolder(dir string, check func(*plan.Plan) error) (*folderProgram, *Model, error) {
	pl, err := readPlan(dir)
	if err != nil {
		return nil, nil, err
	}
	if check != nil {
		if err := check(pl); err != nil {
			return nil, nil, err
		}
	}
	if err := checkFiles(dir, pl); err != nil {
		return nil, nil, err
	}
	src, srcPath, err := readKernelsFile(dir)
	if err != nil {
		return nil, nil, err
	}
	fp, err := loadFolderProgram(dir, pl, src, srcPath)
	if err != nil {
		return nil, nil, withKind(KindInput, err)
	}
	md, err := fp.rebuild()
	if err != nil {
		return nil, nil, err
	}
	return fp, md, nil
}

// modelWeights is the weights a folder's model runs with: its own, or
// the seeded random weights verify uses for a corpus model.
func modelWeights(md *Model) (map[string]*ir.Tensor, error) {
	if md.Weights != nil {
		return md.Weights, nil
	}
	return corpus.RandomWeights(md.Graph, 1)
}

// planBuild is the corpus build options a plan records.
func planBuild(pl *plan.Plan) corpus.Options {
	dt, err := ir.ParseDType(pl.Options.DType)
	if err != nil {
		dt = ir.F32
	}
	o := corpus.Options{Seq: pl.Options.Seq, Past: pl.Options.Past, PastMin: pl.Options.PastMin, PastMax: pl.Options.PastMax, Cache: pl.Options.Cache, MaxSeq: pl.Options.MaxSeq, DType: dt}
	if s := pl.Options.Step; s != nil {
		o.Step = corpus.StepOptions{MaxTokens: s.MaxTokens, MaxSeqs: s.MaxSeqs, BlockSize: s.BlockSize, KVBlocks: s.KVBlocks, AllLogits: s.AllLogits}
	}
	return o
}
