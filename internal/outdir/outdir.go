// Package outdir owns the replacement of an output folder as a whole: the
// new content is written into a hidden sibling folder (a Stage), each file
// with its SHA-256 digest recorded, and swapped into place at the end, so
// that at every instant the folder holds either its complete old content
// or its complete new one. A write that fails removes the sibling and
// leaves the folder as it was (absent stays absent); a process killed
// while writing leaves the sibling behind, which the next Replace beside
// it removes once its writer is gone.
package outdir

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Stage is the new content of a folder being written beside it.
type Stage struct {
	dir     string
	digests map[string]string
	hook    func(step string) error
}

// Dir is the staging folder's path: files a writer cannot route through
// WriteFile or Create (they get no digest) go under it.
func (s *Stage) Dir() string { return s.dir }

// Digests are the SHA-256 digests ("sha256:" and hex) of the files
// written through WriteFile and Create so far, by slash-separated path
// relative to the folder.
func (s *Stage) Digests() map[string]string { return s.digests }

// Step marks a step of the write (a test hook fails or inspects the
// folder there); a writer calls it between parts that WriteFile and
// Create do not cover.
func (s *Stage) Step(name string) error {
	if StepHook != nil {
		StepHook(name)
	}
	if s.hook == nil {
		return nil
	}
	return s.hook(name)
}

// StepHook, when set, is called at every step of every write in the
// process, before Options.Hook. It is for tests that run a command as a
// process and need it to be writing at a known moment (to kill it
// there); nothing else sets it.
var StepHook func(step string)

// WriteFile writes rel (slash-separated, relative to the folder) with
// data and records its digest.
func (s *Stage) WriteFile(rel string, data []byte) error {
	w, err := s.Create(rel)
	if err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		w.(*file).f.Close()
		return fmt.Errorf("write %s: %w", rel, err)
	}
	return w.Close()
}

// Create opens rel for writing; its digest is recorded when it is closed.
func (s *Stage) Create(rel string) (io.WriteCloser, error) {
	if err := s.Step("write " + rel); err != nil {
		return nil, err
	}
	if !fs.ValidPath(rel) || rel == "." {
		return nil, fmt.Errorf("output file %q: not a relative path inside the folder", rel)
	}
	path := filepath.Join(s.dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &file{f: f, h: sha256.New(), rel: rel, s: s}, nil
}

// file is a staged file being written: its bytes go to the file and the
// digest alike.
type file struct {
	f   *os.File
	h   hash.Hash
	rel string
	s   *Stage
}

func (w *file) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.h.Write(p[:n])
	return n, err
}

// Close syncs the file, so that a swapped-in folder never holds a file
// whose bytes the kernel has not kept, and records its digest.
func (w *file) Close() error {
	if err := errors.Join(w.f.Sync(), w.f.Close()); err != nil {
		return fmt.Errorf("write %s: %w", w.rel, err)
	}
	w.s.digests[w.rel] = Digest(w.h)
	return nil
}

// Digest formats a SHA-256 state as the digests are written.
func Digest(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }

// DigestFile is the digest of the file at path, as Stage records it.
func DigestFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return Digest(h), nil
}

// Options say how Replace may treat the folder it replaces.
type Options struct {
	// Owned says whether an existing non-empty folder may be replaced
	// (an error says why not); nil refuses every non-empty folder.
	Owned func(dir string) error
	// Hook, when set, is called at every step of the write ("write
	// FILE", the writer's own steps, "swap") and at the end ("done");
	// an error it returns fails the write there, as a full disk would.
	// Tests use it to inspect the folder at every step.
	Hook func(step string) error
}

// Check says whether dir can be replaced, before anything is written:
// its parent (or the nearest folder above it that exists) takes files,
// and dir is missing, an empty folder, or a folder o.Owned accepts. It
// creates nothing.
func Check(dir string, o Options) error {
	st, err := os.Stat(dir)
	switch {
	case err == nil && !st.IsDir():
		return fmt.Errorf("%s exists and is not a folder", dir)
	case err == nil:
		if err := owned(dir, o); err != nil {
			return err
		}
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	parent := filepath.Dir(filepath.Clean(dir))
	for {
		st, err := os.Stat(parent)
		if err == nil {
			if !st.IsDir() {
				return fmt.Errorf("%s is not a folder", parent)
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) || filepath.Dir(parent) == parent {
			return err
		}
		parent = filepath.Dir(parent)
	}
	f, err := os.CreateTemp(parent, ".lumsearch-probe-*")
	if err != nil {
		return fmt.Errorf("%s cannot be written: %w", parent, err)
	}
	name := f.Name()
	return errors.Join(f.Close(), os.Remove(name))
}

// owned checks that an existing folder may be replaced: empty, or
// accepted by o.Owned.
func owned(dir string, o Options) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		return nil
	}
	if o.Owned == nil {
		return fmt.Errorf("%s is not empty", dir)
	}
	return o.Owned(dir)
}

// Replace writes dir's new content through write into a hidden sibling
// and swaps it into place. When write or the swap fails, the sibling is
// removed and dir is left as it was. A non-empty dir is replaced only
// when o.Owned accepts it.
func Replace(dir string, o Options, write func(*Stage) error) (err error) {
	dir = filepath.Clean(dir)
	if st, err := os.Stat(dir); err == nil {
		if !st.IsDir() {
			return fmt.Errorf("%s exists and is not a folder", dir)
		}
		if err := owned(dir, o); err != nil {
			return err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	parent, base := filepath.Dir(dir), filepath.Base(dir)
	created := missingAncestors(parent)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	removeStale(parent, base)
	tmp, err := os.MkdirTemp(parent, stagePrefix(base)+strconv.Itoa(os.Getpid())+"-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
			// The folders made for it go too (when still empty): a
			// failed write leaves nothing behind.
			for _, d := range created {
				if os.Remove(d) != nil {
					break
				}
			}
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	s := &Stage{dir: tmp, digests: map[string]string{}, hook: o.Hook}
	if err := write(s); err != nil {
		return err
	}
	if err := syncDir(tmp); err != nil {
		return err
	}
	if err := s.Step("swap"); err != nil {
		return err
	}
	old, err := swap(tmp, dir)
	if err != nil {
		return fmt.Errorf("put %s in place of %s: %w", tmp, dir, err)
	}
	// From here the new folder is in place: what is left is tidying.
	if old != "" {
		os.RemoveAll(old)
	}
	syncDir(parent)
	return s.Step("done")
}

// missingAncestors are the folders from dir up that do not exist,
// deepest first: those MkdirAll(dir) would make.
func missingAncestors(dir string) []string {
	var missing []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil || !errors.Is(err, fs.ErrNotExist) {
			break
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	return missing
}

// stagePrefix starts the name of a staging sibling of the folder base:
// hidden, so that the go tool and most listings skip it, and naming the
// writer's process so that a later run knows when it is stale.
func stagePrefix(base string) string { return "." + base + ".lumsearch-" }

// removeStale removes staging siblings of base left by writers that are
// gone (killed while writing).
func removeStale(parent, base string) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	prefix := stagePrefix(base)
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || !e.IsDir() {
			continue
		}
		pid, err := strconv.Atoi(rest[:max(0, strings.IndexByte(rest, '-'))])
		if err != nil || pid == os.Getpid() || alive(pid) {
			continue
		}
		os.RemoveAll(filepath.Join(parent, e.Name()))
	}
}

// Walk lists the regular files under dir by slash-separated relative
// path, sorted; anything else (a link, a device) is an error naming it.
// skip leaves out a path (and, for a folder, everything under it).
func Walk(dir string, skip func(rel string) bool) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		if skip != nil && skip(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case d.IsDir():
			return nil
		case d.Type().IsRegular():
			files = append(files, rel)
			return nil
		}
		return fmt.Errorf("%s is not a regular file", path)
	})
	slices.Sort(files)
	return files, err
}
