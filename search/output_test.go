package search

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/internal/outdir"
	"github.com/lumsearch/lumsearch/plan"
	"github.com/lumsearch/lumsearch/report"
)

// compiledFolders caches the compiled results the folder tests write,
// by model: compiling is the slow part, writing is what they test.
var compiledFolders sync.Map

// compiledResult compiles a tiny corpus model (verified, as a real run
// is) once per test binary.
func compiledResult(t *testing.T, model string) *Result {
	t.Helper()
	if r, ok := compiledFolders.Load(model); ok {
		return r.(*Result)
	}
	m, err := LoadModel(model, ModelOptions{Build: corpus.Options{Seq: 4, Past: -1}})
	require.NoError(t, err)
	res, err := Compile(context.Background(), m, Options{TuneDB: filepath.Join(t.TempDir(), "db.jsonl")})
	require.NoError(t, err)
	compiledFolders.Store(model, res)
	return res
}

// folderFiles reads every file of a folder by relative path.
func folderFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	files, err := outdir.Walk(dir, nil)
	require.NoError(t, err)
	out := map[string]string{}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(f)))
		require.NoError(t, err)
		out[f] = string(data)
	}
	return out
}

// withWriteHook sets writeHook for a test.
func withWriteHook(t *testing.T, hook func(string) error) {
	t.Helper()
	writeHook = hook
	t.Cleanup(func() { writeHook = nil })
}

// TestWriteIsAtomic writes a model's folder over another model's,
// failing the write (a full disk) at every step in turn and looking at
// the folder at every step (where a kill would leave it): it is always
// the whole old folder, whose files match its plan.json, until the swap
// makes it the whole new one; a failed write leaves the old folder and
// nothing beside it, and a failed first write leaves no folder at all.
func TestWriteIsAtomic(t *testing.T) {
	oldRes, newRes := compiledResult(t, "tiny-llama:rmsnorm"), compiledResult(t, "tiny-llama:mlp")
	parent := t.TempDir()
	ref := filepath.Join(parent, "ref")
	require.NoError(t, newRes.Write(context.Background(), ref))
	want := folderFiles(t, ref)
	require.NoError(t, os.RemoveAll(ref))

	var steps []string
	withWriteHook(t, func(step string) error { steps = append(steps, step); return nil })
	probe := filepath.Join(parent, "probe")
	require.NoError(t, newRes.Write(context.Background(), probe))
	require.NoError(t, os.RemoveAll(probe))
	require.Contains(t, steps, "write plan.json")
	require.Contains(t, steps, "swap")

	for _, existed := range []bool{false, true} {
		for failAt, failStep := range steps {
			t.Run(fmt.Sprintf("existed=%v/%s", existed, failStep), func(t *testing.T) {
				base := t.TempDir()
				dir := filepath.Join(base, "out")
				var old map[string]string
				if existed {
					withWriteHook(t, nil)
					require.NoError(t, oldRes.Write(context.Background(), dir))
					old = folderFiles(t, dir)
				}
				i := 0
				withWriteHook(t, func(step string) error {
					got := folderFiles(t, dir)
					if step == "done" {
						assert.Equal(t, want, got, "after the swap the folder is the new one")
					} else {
						assert.Equal(t, old, got, "at %s the folder is the old one, whole", step)
					}
					if got != nil {
						pl, err := readPlan(dir)
						require.NoError(t, err, "at %s", step)
						require.NoError(t, checkFiles(dir, pl), "at %s", step)
					}
					if i == failAt {
						return errors.New("no space left on device")
					}
					i++
					return nil
				})
				err := newRes.Write(context.Background(), dir)
				require.Error(t, err)
				assert.Equal(t, KindOutput, KindOf(err))
				if failStep == "done" {
					return
				}
				assert.ErrorContains(t, err, "no space left on device")
				assert.Equal(t, old, folderFiles(t, dir), "the failed write left the old folder")
				entries, err := os.ReadDir(base)
				require.NoError(t, err)
				if existed {
					assert.Len(t, entries, 1, "nothing beside the folder")
				} else {
					assert.Empty(t, entries, "no folder, empty or not")
				}
			})
		}
	}
}

// TestWriteReplacesOnlyItsOwn: a new model written into a folder of
// another leaves none of the old one's files (its Go package included);
// a folder lumsearch did not write is refused before and at the write,
// and left as it was.
func TestWriteReplacesOnlyItsOwn(t *testing.T) {
	oldRes, newRes := compiledResult(t, "tiny-llama:rmsnorm"), compiledResult(t, "tiny-llama:mlp")
	dir := filepath.Join(t.TempDir(), "out")
	require.NoError(t, oldRes.Write(context.Background(), dir))
	require.NoError(t, CheckOutputDir(dir))
	require.NoError(t, newRes.Write(context.Background(), dir))
	pl, err := readPlan(dir)
	require.NoError(t, err)
	require.NoError(t, checkFiles(dir, pl))
	assert.NoDirExists(t, filepath.Join(dir, "go", "tiny_llama_rmsnorm"))
	assert.DirExists(t, filepath.Join(dir, "go", "tiny_llama_mlp"))

	for name, setup := range map[string]func(dir string){
		"no plan.json": func(dir string) {
			require.NoError(t, os.MkdirAll(dir, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644))
		},
		"a plan.json not by lumsearch": func(dir string) {
			require.NoError(t, os.MkdirAll(dir, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "plan.json"), []byte(`{"trip": "rome"}`), 0o644))
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "theirs")
			setup(dir)
			before := folderFiles(t, dir)
			err := CheckOutputDir(dir)
			require.Error(t, err)
			assert.Equal(t, KindOutput, KindOf(err))
			assert.Contains(t, err.Error(), "not written by lumsearch")
			err = newRes.Write(context.Background(), dir)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "choose another -o")
			assert.Equal(t, before, folderFiles(t, dir))
		})
	}
}

// TestVerifySeesEveryByte flips one seeded random byte of each file of a
// written folder in turn (the report's aside), and adds and removes a
// file: verify fails each time, naming what changed.
func TestVerifySeesEveryByte(t *testing.T) {
	res := compiledResult(t, "tiny-llama:rmsnorm")
	src := filepath.Join(t.TempDir(), "out")
	require.NoError(t, res.Write(context.Background(), src))
	files := folderFiles(t, src)
	r := rand.New(rand.NewPCG(21, 1))
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if reportFile(name) && name != plan.FileName {
			continue
		}
		t.Run(name, func(t *testing.T) {
			dir := copyFolder(t, files)
			data := []byte(files[name])
			require.NotEmpty(t, data)
			at := r.IntN(len(data))
			data[at] ^= byte(1 + r.IntN(255))
			require.NoError(t, os.WriteFile(filepath.Join(dir, filepath.FromSlash(name)), data, 0o644))
			err := Verify(context.Background(), dir, nil)
			require.Error(t, err, "byte %d of %s flipped", at, name)
			if name != plan.FileName {
				assert.Contains(t, err.Error(), name+" was changed")
			}
		})
	}
	t.Run("added", func(t *testing.T) {
		dir := copyFolder(t, files)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "go", "extra.go"), []byte("package x\n"), 0o644))
		err := Verify(context.Background(), dir, nil)
		require.ErrorContains(t, err, "go/extra.go was added")
	})
	t.Run("removed", func(t *testing.T) {
		dir := copyFolder(t, files)
		require.NoError(t, os.Remove(filepath.Join(dir, "model.h")))
		err := Verify(context.Background(), dir, nil)
		require.ErrorContains(t, err, "model.h is missing")
	})
	t.Run("report aside", func(t *testing.T) {
		dir := copyFolder(t, files)
		require.NoError(t, os.WriteFile(filepath.Join(dir, report.FileName), []byte("# my notes\n"), 0o644))
		pl, err := readPlan(dir)
		require.NoError(t, err)
		require.NoError(t, checkFiles(dir, pl))
	})
}

// copyFolder writes files into a new folder.
func copyFolder(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "copy")
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(data), 0o644))
	}
	return dir
}

// reseal rewrites a folder's plan.json after edit changed it and the
// files, with the digests of the files as they now are: a forger's
// folder, whose digests all match.
func reseal(t *testing.T, dir string, edit func(pl *plan.Plan)) {
	t.Helper()
	pl, err := readPlan(dir)
	require.NoError(t, err)
	edit(pl)
	copyPlan := *pl
	copyPlan.Files, copyPlan.Digest = nil, ""
	copyData, err := copyPlan.Encode()
	require.NoError(t, err)
	for _, pkg := range goPackages(pl) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, filepath.FromSlash(pkg), plan.FileName), copyData, 0o644))
	}
	for name := range pl.Files {
		d, err := outdir.DigestFile(filepath.Join(dir, filepath.FromSlash(name)))
		require.NoError(t, err)
		pl.Files[name] = d
	}
	data, err := pl.Seal()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, plan.FileName), data, 0o644))
}

// TestVerifyChecksTheCodeThatRuns: a folder whose digests were all
// rewritten to match still fails when the copies of the module disagree
// (the Go package's PTX against model.cpp's), and, with the NVRTC that
// compiled it, when the embedded PTX is not what kernels.cu compiles to;
// with another NVRTC version verify says it checks digests only; a plan
// of an older format asks for a new compile.
func TestVerifyChecksTheCodeThatRuns(t *testing.T) {
	res := compiledResult(t, "tiny-llama:rmsnorm")
	src := filepath.Join(t.TempDir(), "out")
	require.NoError(t, res.Write(context.Background(), src))
	files := folderFiles(t, src)
	pkg := goPackages(res.Plan)
	require.Len(t, pkg, 1)
	ptxFile := pkg[0] + "/kernels.ptx"
	if files[ptxFile] == "" {
		t.Skip("compiled without NVRTC: no PTX to tamper with")
	}

	t.Run("go package PTX", func(t *testing.T) {
		dir := copyFolder(t, files)
		tampered := strings.Replace(files[ptxFile], "ld.global", "ld.global.nc", 1)
		require.NotEqual(t, files[ptxFile], tampered)
		require.NoError(t, os.WriteFile(filepath.Join(dir, ptxFile), []byte(tampered), 0o644))
		reseal(t, dir, func(*plan.Plan) {})
		err := Verify(context.Background(), dir, nil)
		require.ErrorContains(t, err, ptxFile+" is not what model.cpp embeds")
	})
	t.Run("PTX everywhere", func(t *testing.T) {
		if _, err := loadNVRTC(); err != nil {
			t.Skipf("no NVRTC: %v", err)
		}
		dir := copyFolder(t, files)
		// The same edit in model.cpp's bytes and the Go package's file.
		old := files[ptxFile]
		i := strings.Index(old, "ld.global")
		require.Positive(t, i)
		tampered := old[:i] + "LD" + old[i+2:]
		require.NoError(t, os.WriteFile(filepath.Join(dir, ptxFile), []byte(tampered), 0o644))
		lib := setEmbeddedBytes(t, files[LibraryFile], "kPTX", i, "LD")
		require.NoError(t, os.WriteFile(filepath.Join(dir, LibraryFile), []byte(lib), 0o644))
		reseal(t, dir, func(*plan.Plan) {})
		pl, err := readPlan(dir)
		require.NoError(t, err)
		require.NoError(t, checkFiles(dir, pl), "the forgery passes the digests and copies")
		err = Verify(context.Background(), dir, nil)
		require.ErrorContains(t, err, "is not what NVRTC")
	})
	t.Run("another NVRTC", func(t *testing.T) {
		dir := copyFolder(t, files)
		reseal(t, dir, func(pl *plan.Plan) { pl.NVRTC.Version = "99.1" })
		var lines []string
		err := Verify(context.Background(), dir, func(e Event) { lines = append(lines, e.Line) })
		require.NoError(t, err)
		assert.Contains(t, strings.Join(lines, "\n"), "checked by their digests and copies only")
	})
	t.Run("older format", func(t *testing.T) {
		dir := copyFolder(t, files)
		reseal(t, dir, func(pl *plan.Plan) { pl.Format = 1 })
		err := Verify(context.Background(), dir, nil)
		require.ErrorContains(t, err, "compile the model again")
		assert.Equal(t, KindInput, KindOf(err))
	})
}

// setEmbeddedBytes rewrites bytes at..at+len(b) of model.cpp's array
// name.
func setEmbeddedBytes(t *testing.T, lib, name string, at int, b string) string {
	t.Helper()
	decl := "const unsigned char " + name + "["
	start := strings.Index(lib, decl)
	require.Positive(t, start)
	open := start + strings.Index(lib[start:], "{") + 1
	end := start + strings.Index(lib[start:], "};")
	fields := strings.Split(lib[open:end], ",")
	for k := range len(b) {
		f := fields[at+k]
		fields[at+k] = f[:len(f)-len(strings.TrimLeft(f, " \n"))] + fmt.Sprint(b[k])
	}
	return lib[:open] + strings.Join(fields, ",") + lib[end:]
}

// TestFinalizeCanceledIsNotABug: finalizing under a canceled context
// (the budget, Ctrl-C) fails with the cancellation, never as NVRTC
// rejecting the CUDA or as an internal error.
func TestFinalizeCanceledIsNotABug(t *testing.T) {
	if _, err := loadNVRTC(); err != nil {
		t.Skipf("no NVRTC: %v", err)
	}
	m, err := LoadModel("tiny-llama:rmsnorm", ModelOptions{Build: corpus.Options{Seq: 4, Past: -1}})
	require.NoError(t, err)
	o := Options{TuneDB: filepath.Join(t.TempDir(), "db.jsonl")}.withDefaults()
	sat, _, cm, err := o.price(context.Background(), m.Graph)
	require.NoError(t, err)
	c, err := pipeline(context.Background(), m.Graph, sat, cm)
	require.NoError(t, err)
	src := &source{model: m, sat: sat, m: cm, arch: o.Arch}
	for _, fast := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err = finalize(ctx, src, c, true, fast, io.Discard)
		require.ErrorIs(t, err, context.Canceled)
		assert.NotContains(t, err.Error(), "printer bug")
		assert.NotEqual(t, KindInternal, KindOf(err))
	}
}
