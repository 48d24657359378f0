package search

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lumsearch/lumsearch/internal/outdir"
	"github.com/lumsearch/lumsearch/plan"
)

// modelFile splits a model's name into the file it was read from and the
// rest of the name: "m.onnx" is the file itself, "DIR/config.json:KIND"
// the config file and ":KIND"; a corpus name has no file ("").
func modelFile(name string) (file, rest string) {
	if strings.HasSuffix(name, ".onnx") {
		return name, ""
	}
	if i := strings.LastIndex(name, ".json:"); i >= 0 {
		return name[:i+len(".json")], name[i+len(".json"):]
	}
	return "", ""
}

// sourceFiles are the files a model file was built with: the file and,
// for a Hugging Face config.json, the safetensors weights beside it.
func sourceFiles(file string) ([]string, error) {
	files := []string{file}
	if filepath.Base(file) == "config.json" {
		weights, err := filepath.Glob(filepath.Join(filepath.Dir(file), "*.safetensors"))
		if err != nil {
			return nil, err
		}
		slices.Sort(weights)
		files = append(files, weights...)
	}
	return files, nil
}

// modelSource records the file the model called name was read from, for
// an output folder dir: its absolute path, its path relative to dir, and
// the digests of what it was built from. A corpus model has none.
func modelSource(name, dir string) (*plan.Source, error) {
	file, _ := modelFile(name)
	if file == "" {
		return nil, nil
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", name, err)
	}
	src := &plan.Source{Path: abs, Files: map[string]string{}}
	if absDir, err := filepath.Abs(dir); err == nil {
		if rel, err := filepath.Rel(absDir, abs); err == nil {
			src.Rel = filepath.ToSlash(rel)
		}
	}
	files, err := sourceFiles(abs)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", name, err)
	}
	for _, f := range files {
		d, err := outdir.DigestFile(f)
		if err != nil {
			return nil, fmt.Errorf("model %s: %w", name, err)
		}
		src.Files[filepath.Base(f)] = d
	}
	return src, nil
}

// resolveModel is the name to rebuild an output folder's model by, from
// any working directory: for a model read from a file, the file where
// plan.json says it is (beside the folder as it was, then at its
// absolute path), checked against its digests. A file that moved or
// changed is a KindInput error saying what the folder needs.
func resolveModel(dir string, pl *plan.Plan) (string, error) {
	if pl.Source == nil {
		return pl.Model, nil
	}
	_, rest := modelFile(pl.Model)
	var tried []string
	var changed error
	cands := []string{pl.Source.Path}
	if pl.Source.Rel != "" {
		cands = []string{filepath.Join(dir, filepath.FromSlash(pl.Source.Rel)), pl.Source.Path}
	}
	for _, cand := range cands {
		if cand == "" || slices.Contains(tried, cand) {
			continue
		}
		tried = append(tried, cand)
		if _, err := os.Stat(cand); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		err := sameSource(cand, pl.Source)
		if err == nil {
			return cand + rest, nil
		}
		if changed == nil {
			changed = err
		}
	}
	if changed != nil {
		return "", withKind(KindInput, fmt.Errorf("the model %s the folder was compiled from has changed since: %w; verify checks the program against the model it was compiled from: put that file back, or compile again", pl.Model, changed))
	}
	return "", withKind(KindInput, fmt.Errorf("the folder needs the model it was compiled from, %s, which is not at %s: put it back, or move it along with the folder so that it is at %s from the folder",
		pl.Model, strings.Join(tried, " nor at "), pl.Source.Rel))
}

// sameSource checks that the model file at path, and the files beside it
// it was built with, are those src records.
func sameSource(path string, src *plan.Source) error {
	files, err := sourceFiles(path)
	if err != nil {
		return err
	}
	found := map[string]bool{}
	for _, f := range files {
		base := filepath.Base(f)
		found[base] = true
		want, ok := src.Files[base]
		if !ok {
			return fmt.Errorf("%s is new beside %s", f, path)
		}
		got, err := outdir.DigestFile(f)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("%s has digest %s, the folder was compiled from %s", f, got, want)
		}
	}
	for base := range src.Files {
		if !found[base] {
			return fmt.Errorf("%s is missing beside %s", base, path)
		}
	}
	return nil
}
