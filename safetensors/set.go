package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Set is a group of safetensors files opened together as one checkpoint,
// typically the shards of a large model. Tensor names are unique across the
// set.
type Set struct {
	dir    string
	files  []*File          // sorted by path
	byName map[string]*File // tensor name -> file holding it
	names  []string         // sorted
}

// OpenDir opens a checkpoint folder as one Set.
//
// Without an index, every regular file (or symlink to one) named
// *.safetensors directly in dir is opened; a tensor name appearing in two
// files is an error. With exactly one *.safetensors.index.json (normally
// model.safetensors.index.json), its "weight_map" (tensor name -> file name)
// is authoritative: exactly the files it names are opened (other shards in
// the folder are ignored), and it is an error for it to name a file that is
// not there, to map a tensor to a file that does not hold it, or to omit a
// tensor that one of its files holds. More than one index file is an error,
// as is a folder with no shards.
func OpenDir(dir string) (*Set, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	var shards, indexes []string
	for _, de := range entries {
		name := de.Name()
		switch {
		case strings.HasSuffix(name, ".safetensors.index.json"):
			indexes = append(indexes, name)
		case strings.HasSuffix(name, ".safetensors"):
			// Resolve symlinks (Hugging Face caches link snapshots to blobs).
			if st, err := os.Stat(filepath.Join(dir, name)); err == nil && st.Mode().IsRegular() {
				shards = append(shards, name)
			}
		}
	}
	slices.Sort(shards)
	slices.Sort(indexes)
	if len(indexes) > 1 {
		return nil, &Error{File: dir, Reason: fmt.Sprintf("more than one index file: %s", strings.Join(indexes, ", "))}
	}

	var weightMap map[string]string
	indexPath := ""
	if len(indexes) == 1 {
		indexPath = filepath.Join(dir, indexes[0])
		if weightMap, err = readIndex(indexPath); err != nil {
			return nil, err
		}
		if shards, err = indexedShards(indexPath, weightMap, shards); err != nil {
			return nil, err
		}
	}
	if len(shards) == 0 {
		return nil, &Error{File: dir, Reason: "no *.safetensors files"}
	}

	s := &Set{dir: dir, byName: make(map[string]*File)}
	for _, shard := range shards {
		f, err := Open(filepath.Join(dir, shard))
		if err != nil {
			_ = s.Close()
			return nil, err
		}
		s.files = append(s.files, f)
		for _, name := range f.names {
			if prev, dup := s.byName[name]; dup {
				_ = s.Close()
				return nil, &Error{File: f.path, Tensor: name, Reason: fmt.Sprintf("duplicate tensor, also in %s", prev.path)}
			}
			s.byName[name] = f
		}
	}
	s.names = make([]string, 0, len(s.byName))
	for name := range s.byName {
		s.names = append(s.names, name)
	}
	slices.Sort(s.names)

	if weightMap != nil {
		if err := s.checkIndex(indexPath, weightMap); err != nil {
			_ = s.Close()
			return nil, err
		}
	}
	return s, nil
}

// readIndex reads the weight_map of a *.safetensors.index.json file.
func readIndex(path string) (map[string]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	var weightMap map[string]string
	err = decodeObject(raw, func(key string, val json.RawMessage) error {
		if key != "weight_map" {
			return nil
		}
		weightMap = map[string]string{}
		return decodeObject(val, func(tensor string, file json.RawMessage) error {
			var name string
			if err := json.Unmarshal(file, &name); err != nil {
				return &Error{File: path, Tensor: tensor, Reason: "weight_map value is not a file name", Err: err}
			}
			weightMap[tensor] = name
			return nil
		})
	})
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			return nil, e
		}
		var me *memberError
		if errors.As(err, &me) {
			return nil, &Error{File: path, Tensor: me.key, Reason: "invalid index JSON", Err: me.err}
		}
		return nil, &Error{File: path, Reason: "invalid index JSON", Err: err}
	}
	if weightMap == nil {
		return nil, &Error{File: path, Reason: "no weight_map object"}
	}
	return weightMap, nil
}

// indexedShards returns the sorted, distinct files named by weightMap,
// checking that each is a plain file name present among shards.
func indexedShards(indexPath string, weightMap map[string]string, shards []string) ([]string, error) {
	tensors := make([]string, 0, len(weightMap))
	for t := range weightMap {
		tensors = append(tensors, t)
	}
	slices.Sort(tensors)
	var named []string
	for _, t := range tensors {
		file := weightMap[t]
		if file == "" || file == "." || file == ".." || strings.ContainsAny(file, `/\`) {
			return nil, &Error{File: indexPath, Tensor: t, Reason: fmt.Sprintf("weight_map file %q is not a plain file name", file)}
		}
		if _, found := slices.BinarySearch(shards, file); !found {
			return nil, &Error{File: indexPath, Tensor: t, Reason: fmt.Sprintf("weight_map names missing file %q", file)}
		}
		named = append(named, file)
	}
	slices.Sort(named)
	return slices.Compact(named), nil
}

// checkIndex verifies that weightMap and the opened files agree exactly.
func (s *Set) checkIndex(indexPath string, weightMap map[string]string) error {
	listed := make([]string, 0, len(weightMap))
	for t := range weightMap {
		listed = append(listed, t)
	}
	slices.Sort(listed)
	for _, t := range listed {
		want := weightMap[t]
		f, ok := s.byName[t]
		if !ok {
			return &Error{File: indexPath, Tensor: t, Reason: fmt.Sprintf("weight_map names it in %q, which does not contain it", want)}
		}
		if got := filepath.Base(f.path); got != want {
			return &Error{File: indexPath, Tensor: t, Reason: fmt.Sprintf("weight_map names it in %q, but it is in %q", want, got)}
		}
	}
	for _, t := range s.names {
		if _, ok := weightMap[t]; !ok {
			return &Error{File: s.byName[t].path, Tensor: t, Reason: fmt.Sprintf("not listed in the weight_map of %s", indexPath)}
		}
	}
	return nil
}

// Close closes every file of the set. Tensor data obtained from s must not be
// used afterwards. Close is idempotent.
func (s *Set) Close() error {
	var errs []error
	for _, f := range s.files {
		errs = append(errs, f.Close())
	}
	s.files, s.byName, s.names = nil, nil, nil
	return errors.Join(errs...)
}

// Dir returns the folder the set was opened from.
func (s *Set) Dir() string { return s.dir }

// Files returns the opened files, sorted by path. The slice is a copy; the
// files belong to the set and are closed by s.Close.
func (s *Set) Files() []*File { return slices.Clone(s.files) }

// Tensor returns the named tensor from whichever file holds it.
func (s *Set) Tensor(name string) (Tensor, bool) {
	f, ok := s.byName[name]
	if !ok {
		return Tensor{}, false
	}
	return f.Tensor(name)
}

// Names returns every tensor name in the set, sorted. The slice is a copy.
func (s *Set) Names() []string { return slices.Clone(s.names) }

// Want is one tensor a checkpoint is expected to hold, for Set.Check.
type Want struct {
	Name  string  // tensor name
	Shape []int64 // expected shape; nil or empty for a scalar
}

// maxListedProblems bounds how many problems CheckError.Error lists.
const maxListedProblems = 10

// CheckError is returned by Set.Check. Problems holds every problem found,
// each "NAME: what is wrong"; Error lists the first ten.
type CheckError struct {
	Dir      string   // folder of the set
	Problems []string // all problems, in want order then unexpected names sorted
}

// Error lists up to ten problems, one per line, and counts the rest.
func (e *CheckError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "safetensors: %s: %d problem", e.Dir, len(e.Problems))
	if len(e.Problems) != 1 {
		b.WriteString("s")
	}
	for i, p := range e.Problems {
		if i == maxListedProblems {
			fmt.Fprintf(&b, "\n\t... and %d more", len(e.Problems)-maxListedProblems)
			break
		}
		b.WriteString("\n\t")
		b.WriteString(p)
	}
	return b.String()
}

// Check verifies that the set holds exactly the tensors in want, each with
// the wanted shape and, when dtypes is non-empty, one of those dtypes. It
// returns nil or a *CheckError whose problems are, per tensor:
//
//	NAME: missing
//	NAME: shape [14336 4096], want [4096 14336]
//	NAME: dtype F32, want BF16           (or "want one of [BF16 F16]")
//	NAME: listed twice in want
//	NAME: unexpected                     (in the set but not in want)
func (s *Set) Check(want []Want, dtypes ...string) error {
	var problems []string
	wanted := make(map[string]bool, len(want))
	for _, w := range want {
		if wanted[w.Name] {
			problems = append(problems, w.Name+": listed twice in want")
			continue
		}
		wanted[w.Name] = true
		t, ok := s.Tensor(w.Name)
		if !ok {
			problems = append(problems, w.Name+": missing")
			continue
		}
		if !slices.Equal(t.Shape, w.Shape) {
			problems = append(problems, fmt.Sprintf("%s: shape %v, want %v", w.Name, t.Shape, w.Shape))
		}
		if len(dtypes) > 0 && !slices.Contains(dtypes, t.DType) {
			if len(dtypes) == 1 {
				problems = append(problems, fmt.Sprintf("%s: dtype %s, want %s", w.Name, t.DType, dtypes[0]))
			} else {
				problems = append(problems, fmt.Sprintf("%s: dtype %s, want one of %v", w.Name, t.DType, dtypes))
			}
		}
	}
	for _, name := range s.names {
		if !wanted[name] {
			problems = append(problems, name+": unexpected")
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return &CheckError{Dir: s.dir, Problems: problems}
}
