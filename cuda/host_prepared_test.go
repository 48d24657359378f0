package cuda

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/rules"
	"github.com/lumsearch/lumsearch/safetensors"
)

// hostPreparedProgram is the C program of the prepared-weights tests: it
// creates the model, sets every input (zeroed), then for each file named
// on the command line loads it with lum_load_prepared and runs the model,
// between marker lines; at the end it loads a weight by hand, after which
// the model needs preparing again.
const hostPreparedProgram = `#include "model.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char err[1024];

static void report(const char* what, int rc) {
    printf("%s: %d: %s\n", what, rc, rc == LUM_OK ? "ok" : err);
}

int main(int argc, char** argv) {
    size_t n = lum_tensor_count(), i;
    lum_model* m = NULL;
    int a, rc = lum_create(&m, err, sizeof err);
    if (rc != LUM_OK) {
        report("lum_create", rc);
        return 0;
    }
    report("null path", lum_load_prepared(m, NULL, err, sizeof err));
    report("null model", lum_load_prepared(NULL, argv[0], err, sizeof err));
    for (i = 0; i < n; i++) {
        const lum_tensor_info* t = lum_tensor(i);
        if (t->kind != LUM_INPUT) continue;
        unsigned char* data = calloc(1, t->bytes + 1);
        rc = lum_set_input(m, t->name, data, t->bytes, err, sizeof err);
        if (rc != LUM_OK) report(t->name, rc);
        free(data);
    }
    for (a = 1; a < argc; a++) {
        printf("== load %d\n", a);
        report("lum_load_prepared", lum_load_prepared(m, argv[a], err, sizeof err));
        printf("== run %d\n", a);
        report("lum_run", lum_run(m, err, sizeof err));
        printf("== end %d\n", a);
    }
    for (i = 0; i < n; i++) {
        const lum_tensor_info* t = lum_tensor(i);
        if (t->kind != LUM_WEIGHT) continue;
        unsigned char* data = calloc(1, t->bytes + 1);
        report("a weight by hand", lum_load_weights(m, t->name, data, t->bytes, err, sizeof err));
        report("run after it", lum_run(m, err, sizeof err));
        free(data);
        break;
    }
    lum_destroy(m);
    printf("done\n");
    return 0;
}
`

// rawSafetensors is a safetensors file with the given header members
// (already JSON) and data, for files the writer would never make.
func rawSafetensors(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	return append(append(b, header...), data...)
}

// preparedCase is one model of TestHostLibraryPrepared.
type preparedCase struct {
	name    string
	lp      *lower.Program
	ks      []*Kernel
	weights map[string]*ir.Tensor
}

// hostPreparedCase lowers and prints one model of the prepared-weights
// tests with random weights: a saturated tiny llama decode step (merged
// QKV and gate/up weights and rotary tables prepared at load; the program
// other tests of the package share), a saturated tiny gpt2 (its position
// embedding gathered at load, and so left out of the file), or "no
// weights", a model with none at all.
func hostPreparedCase(t *testing.T, name string, seed uint64) preparedCase {
	t.Helper()
	if name == "no weights" {
		nb := ir.NewBuilder(name)
		x := nb.Input("x", ir.F32, 4, 8)
		nb.Output("y", nb.Add(nb.Mul(x, x), nb.Iota(ir.F32, ir.Shape{4, 8}, 1)))
		g, err := nb.Build()
		require.NoError(t, err)
		prog, err := rules.NaiveProgram(context.Background(), g, rules.SaturateOptions{})
		require.NoError(t, err)
		lp, err := lower.FromExtraction(prog.EGraph, g, prog.Classes, prog.Problem, prog.Solution)
		require.NoError(t, err)
		ks, err := PrintProgram(lp)
		require.NoError(t, err)
		return preparedCase{name, lp, ks, map[string]*ir.Tensor{}}
	}
	p := corpusFused(t, name)
	require.NotEmpty(t, p.lp.Prep, name)
	w, err := corpus.RandomWeights(p.g, seed)
	require.NoError(t, err)
	return preparedCase{name, p.lp, p.ks, w}
}

// fnv1a is the hash the fake driver prints of each copy.
func fnv1a(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return h
}

// block returns the lines the prepared-weights program printed between
// "== start i" and "== end i" (exclusive).
func block(out, start, end string, i int) []string {
	s := strings.Index(out, fmt.Sprintf("== %s %d\n", start, i))
	e := strings.Index(out, fmt.Sprintf("== %s %d\n", end, i))
	if s < 0 || e < s {
		return nil
	}
	text := out[s:e]
	return strings.Split(strings.TrimSpace(text[strings.IndexByte(text, '\n')+1:]), "\n")
}

// TestHostLibraryPrepared writes the prepared weights of programs that
// prepare weights at load (and of one with no weights) as lumsearch
// compile does, and loads them with lum_load_prepared against the fake
// driver: the load copies exactly the file's bytes of each tensor, and
// the constants, to their buffers, launches nothing, and the run then
// launches what it should. Corrupted or foreign files fail cleanly,
// naming the file and the tensor, and leave the model as it was.
func TestHostLibraryPrepared(t *testing.T) {
	// Parallel: independent of the other tests, it shares the machine's
	// cores with them once the sequential tests are done.
	t.Parallel()
	needCompilers(t)
	fake := fakeDriverDir(t)
	for i, name := range []string{"tiny-llama:decode", "tiny-gpt2:model", "no weights"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := hostPreparedCase(t, name, uint64(i+1))
			lp, ks := c.lp, c.ks
			ptx, cubin := hostModule(t, ks)
			header, source, err := HostLibrary(lp, ks, ptx, cubin, "sm_90")
			require.NoError(t, err)
			exe := buildHostWith(t, header, source, hostPreparedProgram)

			stored, err := lower.PrepareWeights(context.Background(), lp, c.weights)
			require.NoError(t, err)
			storedBufs, err := lower.StoredBuffers(lp)
			require.NoError(t, err)
			digest, err := lower.WeightsDigest(lp)
			require.NoError(t, err)
			assert.Contains(t, header, fmt.Sprintf("#define LUM_PROGRAM_DIGEST \"%s\"\n", digest))
			meta := map[string]string{lower.DigestMetadataKey: digest, "lumsearch.model": lp.Name}
			good, err := safetensors.Encode(stored, meta)
			require.NoError(t, err)

			// The files, each with the message its load must give.
			dir := t.TempDir()
			// want is the message after the directory; " ... " separates
			// parts of it that must appear in order.
			type file struct {
				name, want string
				data       []byte
			}
			files := []file{
				{"missing", "missing.safetensors: No such file or directory", nil},
				{"empty", "empty.safetensors: 0 bytes, too short", []byte{}},
				{"header cut", "header cut.safetensors: a header of", good[:12]},
				{"huge header", "huge header.safetensors: a header of 1099511627776 bytes, more than the 100000000",
					binary.LittleEndian.AppendUint64(nil, 1<<40)},
				{"not json", "not json.safetensors: a malformed header at byte 8: expected an object", rawSafetensors("[1, 2]  ", nil)},
				{"trailing json", "trailing json.safetensors: a malformed header at byte", rawSafetensors(`{"__metadata__":{}} x`, nil)},
				{"no metadata", "no metadata.safetensors: no lumsearch.program in the metadata", mustEncode(t, stored, nil)},
				{"other program", "other program.safetensors: prepared for another program (lumsearch.program 0000",
					mustEncode(t, stored, map[string]string{lower.DigestMetadataKey: strings.Repeat("0", 64)})},
				{"unknown tensor", `unknown tensor.safetensors: tensor "bogus" is not a weight or prepared weight`,
					mustEncode(t, withTensor(stored, "bogus", mustTensor(t, ir.F32, ir.Shape{2}, 1, 2)), meta)},
			}
			if len(storedBufs) > 0 {
				first, last := storedBufs[0], storedBufs[len(storedBufs)-1]
				// Tensors in the file's data order, to aim at the last.
				ordered := fileOrder(t, good)
				lastInFile := ordered[len(ordered)-1]
				var other ir.DType = ir.F16
				if first.DType == ir.F16 {
					other = ir.F32
				}
				otherName, err := safetensors.DTypeName(other)
				require.NoError(t, err)
				firstName, err := safetensors.DTypeName(first.DType)
				require.NoError(t, err)
				reshaped := *stored[first.Name]
				reshaped.Shape = slices.Clone(reshaped.Shape)
				slices.Reverse(reshaped.Shape)
				if reshaped.Shape.Equal(first.Shape) {
					reshaped.Shape = append(ir.Shape{1}, reshaped.Shape...)
				}
				files = append(files,
					file{"truncated", fmt.Sprintf(`truncated.safetensors: tensor "%s": data_offsets [ ... ] lie beyond the %d bytes of data (is the file truncated?)`, lastInFile, len(good)-3-8-int(binary.LittleEndian.Uint64(good))), good[:len(good)-3]},
					file{"trailing bytes", "trailing bytes.safetensors: 5 bytes after the last tensor", append(slices.Clone(good), 1, 2, 3, 4, 5)},
					file{"wrong dtype", fmt.Sprintf(`wrong dtype.safetensors: tensor "%s": dtype %s does not fit the model's %s %s %s`, first.Name, otherName, first.Kind, first.Name, typeOf(first)),
						[]byte(strings.Replace(string(good), fmt.Sprintf(`%q:{"dtype":%q`, first.Name, firstName), fmt.Sprintf(`%q:{"dtype":%q`, first.Name, otherName), 1))},
					file{"wrong shape", fmt.Sprintf(`wrong shape.safetensors: tensor "%s": shape [ ... ] does not fit the model's %s %s %s`, first.Name, first.Kind, first.Name, typeOf(first)),
						mustEncode(t, withTensor(stored, first.Name, &reshaped), meta)},
					file{"missing tensor", fmt.Sprintf(`missing tensor.safetensors: tensor "%s" is missing`, last.Name),
						mustEncode(t, withTensor(stored, last.Name, nil), meta)},
					file{"gap", fmt.Sprintf(`gap.safetensors: tensor "%s": data_offsets [8, `, ordered[0]), shiftData(t, good, 8)},
					file{"bad offsets", fmt.Sprintf(`bad offsets.safetensors: tensor "%s": a malformed header at byte`, ordered[0]),
						[]byte(strings.Replace(string(good), `"data_offsets":[0,`, `"data_offsets":[-0,`, 1))},
					file{"field twice", fmt.Sprintf(`field twice.safetensors: tensor "%s": a malformed header at byte`, first.Name),
						[]byte(strings.Replace(string(good), fmt.Sprintf(`%q:{"dtype":%q,`, first.Name, firstName), fmt.Sprintf(`%q:{"dtype":"F16" ,"dtype"   :`, first.Name), 1))},
				)
				if len(ordered) > 1 {
					// Which of the two comes first depends on their sizes.
					files = append(files, file{"overlap", `overlap.safetensors: tensor " ... ] overlap the tensor before it`, overlapFirstTwo(t, good, ordered)})
				}
			}
			files = append(files, file{"good", "", good},
				file{"unknown after good", `unknown after good.safetensors: tensor "bogus"`,
					mustEncode(t, withTensor(stored, "bogus", mustTensor(t, ir.F32, ir.Shape{2}, 1, 2)), meta)})
			files = append(files, file{name: "a directory", want: "a directory.safetensors: not a regular file"})
			var paths []string
			for _, f := range files {
				p := filepath.Join(dir, f.name+".safetensors")
				switch {
				case f.name == "a directory":
					require.NoError(t, os.Mkdir(p, 0o755))
				case f.data != nil:
					require.NoError(t, os.WriteFile(p, f.data, 0o644))
				}
				paths = append(paths, p)
			}

			out := runHostArgs(t, exe, paths, "LD_LIBRARY_PATH="+fake, "FAKE_CUDA_LOG_COPIES=1")
			assert.Contains(t, out, "null path: 4: lum_load_prepared: a NULL model or path\n")
			assert.Contains(t, out, "null model: 4: lum_load_prepared: a NULL model or path\n")
			prepared := false
			for i, f := range files {
				load := block(out, "load", "run", i+1)
				run := block(out, "run", "end", i+1)
				require.NotEmpty(t, load, "%s:\n%s", f.name, out)
				result := load[len(load)-1]
				if f.want == "" {
					assert.Equal(t, "lum_load_prepared: 0: ok", result, f.name)
					assert.ElementsMatch(t, expectedCopies(t, lp, good), load[:len(load)-1], "%s: the copies", f.name)
					prepared = true
				} else {
					assert.Regexp(t, `^lum_load_prepared: 7: lum_load_prepared: `, result, f.name)
					parts := strings.Split(f.want, " ... ")
					pattern := regexp.QuoteMeta(filepath.Join(dir, parts[0]))
					for _, p := range parts[1:] {
						pattern += ".*" + regexp.QuoteMeta(p)
					}
					assert.Regexp(t, pattern, result, f.name)
					assert.Len(t, load, 1, "%s: a rejected file copies nothing", f.name)
				}
				for _, line := range load {
					assert.False(t, strings.HasPrefix(line, "launch "), "%s: the load launches %s", f.name, line)
				}
				if prepared {
					require.NotEmpty(t, run)
					assert.Equal(t, "lum_run: 0: ok", run[len(run)-1], f.name)
					assert.Equal(t, expectedLaunches(lp, ks, len(lp.Prep), len(ks)), run[:len(run)-1], "%s: the run's launches", f.name)
				} else {
					assert.Equal(t, []string{"lum_run: 5: lum_run: the model is not prepared (lum_prepare after loading every weight, or lum_load_prepared)"}, run, f.name)
				}
			}
			if len(storedBufs) > 0 && slices.ContainsFunc(storedBufs, func(b *lower.Buffer) bool { return b.Kind == lower.Weight }) {
				assert.Contains(t, out, "a weight by hand: 0: ok\nrun after it: 5: lum_run: the model is not prepared")
			}
			assert.NotContains(t, out, "outside every allocation")
			assert.Contains(t, out, "fake: 0 allocations outstanding, 0 modules loaded, 0 contexts retained, context depth 0\ndone\n")
		})
	}
}

func mustEncode(t *testing.T, tensors map[string]*ir.Tensor, meta map[string]string) []byte {
	t.Helper()
	b, err := safetensors.Encode(tensors, meta)
	require.NoError(t, err)
	return b
}

func mustTensor(t *testing.T, dt ir.DType, shape ir.Shape, vals ...float64) *ir.Tensor {
	t.Helper()
	x, err := ir.TensorOf(dt, shape, vals...)
	require.NoError(t, err)
	return x
}

// withTensor is tensors with name set to x (removed when x is nil).
func withTensor(tensors map[string]*ir.Tensor, name string, x *ir.Tensor) map[string]*ir.Tensor {
	out := maps.Clone(tensors)
	if x == nil {
		delete(out, name)
	} else {
		out[name] = x
	}
	return out
}

// headerOf splits a safetensors file into its parsed header and data.
func headerOf(t *testing.T, file []byte) (map[string]json.RawMessage, []byte) {
	t.Helper()
	n := binary.LittleEndian.Uint64(file)
	var h map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(file[8:8+n], &h))
	return h, file[8+n:]
}

type stEntry struct {
	DType       string   `json:"dtype"`
	Shape       []int64  `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// fileOrder lists a file's tensors by their place in the data.
func fileOrder(t *testing.T, file []byte) []string {
	t.Helper()
	h, _ := headerOf(t, file)
	var names []string
	offsets := map[string][2]int64{}
	for name, raw := range h {
		if name == safetensors.MetadataKey {
			continue
		}
		var e stEntry
		require.NoError(t, json.Unmarshal(raw, &e))
		names = append(names, name)
		offsets[name] = e.DataOffsets
	}
	slices.SortFunc(names, func(a, b string) int {
		x, y := offsets[a], offsets[b]
		if x[0] != y[0] {
			return int(x[0] - y[0])
		}
		return int(x[1] - y[1])
	})
	return names
}

// rewrite makes a file from file's header, its tensors' offsets changed
// by move, and data.
func rewrite(t *testing.T, file []byte, move func(name string, off [2]int64) [2]int64, data []byte) []byte {
	t.Helper()
	h, _ := headerOf(t, file)
	out := map[string]any{}
	for name, raw := range h {
		if name == safetensors.MetadataKey {
			out[name] = raw
			continue
		}
		var e stEntry
		require.NoError(t, json.Unmarshal(raw, &e))
		e.DataOffsets = move(name, e.DataOffsets)
		out[name] = e
	}
	text, err := json.Marshal(out)
	require.NoError(t, err)
	return rawSafetensors(string(text), data)
}

// shiftData puts n bytes before the data: a gap before the first tensor.
func shiftData(t *testing.T, file []byte, n int64) []byte {
	t.Helper()
	_, data := headerOf(t, file)
	return rewrite(t, file, func(_ string, off [2]int64) [2]int64 { return [2]int64{off[0] + n, off[1] + n} },
		append(make([]byte, n), data...))
}

// overlapFirstTwo starts the second tensor in the data where the first
// starts (and drops the bytes the move frees, so that the size stays
// consistent).
func overlapFirstTwo(t *testing.T, file []byte, ordered []string) []byte {
	t.Helper()
	h, data := headerOf(t, file)
	var second stEntry
	require.NoError(t, json.Unmarshal(h[ordered[1]], &second))
	shift := second.DataOffsets[0]
	return rewrite(t, file, func(name string, off [2]int64) [2]int64 {
		if name == ordered[1] {
			return [2]int64{off[0] - shift, off[1] - shift}
		}
		return off
	}, data)
}

// expectedCopies are the copy lines of a good load: each non-empty
// constant's bytes and each tensor's bytes in the file, to its buffer.
func expectedCopies(t *testing.T, lp *lower.Program, file []byte) []string {
	t.Helper()
	alloc := map[int]int{}
	for _, b := range lp.Buffers {
		if b.Kind != lower.Temp {
			alloc[b.ID] = len(alloc) + 1
		}
	}
	var lines []string
	line := func(id int, data []byte) {
		if len(data) > 0 {
			lines = append(lines, fmt.Sprintf("copy a%d+0 %d bytes fnv %016x", alloc[id], len(data), fnv1a(data)))
		}
	}
	for _, b := range lp.Buffers {
		if b.Kind == lower.Constant {
			g := &ir.Graph{Name: "constant", Nodes: []*ir.Node{b.Leaf}, Outputs: []ir.Output{{Name: "out", Value: 0}}}
			res, err := ir.Eval(context.Background(), g, nil, ir.EvalOptions{})
			require.NoError(t, err)
			line(b.ID, EncodeTensor(res.Outputs["out"]))
		}
	}
	f, err := safetensors.Parse("good", file)
	require.NoError(t, err)
	stored, err := lower.StoredBuffers(lp)
	require.NoError(t, err)
	require.Len(t, f.Names(), len(stored))
	for _, b := range stored {
		tn, ok := f.Tensor(b.Name)
		require.True(t, ok, b.Name)
		require.Len(t, tn.Data, int(b.Bytes), b.Name)
		line(b.ID, tn.Data)
	}
	return lines
}

// sanitizerFlags are the flags of an AddressSanitizer and
// UndefinedBehaviorSanitizer build when g++ makes one here, else none.
func sanitizerFlags(t *testing.T) []string {
	t.Helper()
	flags := []string{"-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"}
	dir := t.TempDir()
	src := filepath.Join(dir, "probe.cpp")
	require.NoError(t, os.WriteFile(src, []byte("int main() { return 0; }\n"), 0o644))
	cmd := exec.Command("g++", append(flags, src, "-o", filepath.Join(dir, "probe"))...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Logf("no sanitizer build: %v\n%s", err, out)
		return nil
	}
	if err := exec.Command(filepath.Join(dir, "probe")).Run(); err != nil {
		t.Logf("no sanitizer build: the probe fails: %v", err)
		return nil
	}
	return flags
}

// TestHostLibraryPreparedMutations loads hundreds of damaged copies of a
// good prepared weights file (bytes of the header and its length changed,
// JSON tokens inserted, the file cut short) with the library built under
// the address and undefined-behaviour sanitizers where g++ has them: each
// load succeeds or fails with LUM_ERR_FILE naming the file, and nothing
// crashes, reads out of bounds or leaks.
func TestHostLibraryPreparedMutations(t *testing.T) {
	skipLong(t)
	// Parallel: independent of the other tests, it shares the machine's
	// cores with them once the sequential tests are done.
	t.Parallel()
	needCompilers(t)
	fake := fakeDriverDir(t)
	c := hostPreparedCase(t, "tiny-gpt2:model", 7) // prepared buffers, a weight left out
	ptx, cubin := hostModule(t, c.ks)
	header, source, err := HostLibrary(c.lp, c.ks, ptx, cubin, "sm_90")
	require.NoError(t, err)
	exe := buildHostWith(t, header, source, hostPreparedProgram, sanitizerFlags(t)...)
	stored, err := lower.PrepareWeights(context.Background(), c.lp, c.weights)
	require.NoError(t, err)
	digest, err := lower.WeightsDigest(c.lp)
	require.NoError(t, err)
	good := mustEncode(t, stored, map[string]string{lower.DigestMetadataKey: digest})
	n := int(binary.LittleEndian.Uint64(good))

	rng := rand.New(rand.NewPCG(42, 1))
	tokens := []string{"{", "}", "[", "]", ",", ":", `"`, `\`, `\u`, `\ud800`, `\uDC00`, "0", "-1", "1e3", "18446744073709551616",
		"null", `"dtype"`, `"shape"`, `"data_offsets"`, `"__metadata__"`, " ", "\x00", "\xff"}
	dir := t.TempDir()
	var paths []string
	for i := range 300 {
		f := slices.Clone(good)
		switch i % 5 {
		case 0: // flip bytes in the header
			for range 1 + rng.IntN(4) {
				f[8+rng.IntN(n)] ^= byte(1 + rng.IntN(255))
			}
		case 1: // insert a token into the header and fix the length
			at := 8 + rng.IntN(n)
			tok := tokens[rng.IntN(len(tokens))]
			f = slices.Concat(f[:at], []byte(tok), f[at:])
			binary.LittleEndian.PutUint64(f, uint64(n+len(tok)))
		case 2: // change the header length
			binary.LittleEndian.PutUint64(f, uint64(n+rng.IntN(64)-32))
		case 3: // cut the file short
			f = f[:rng.IntN(len(f))]
		case 4: // delete a run of header bytes and fix the length
			at, k := 8+rng.IntN(n), 1+rng.IntN(8)
			k = min(k, 8+n-at)
			f = slices.Concat(f[:at], f[at+k:])
			binary.LittleEndian.PutUint64(f, uint64(n-k))
		}
		p := filepath.Join(dir, fmt.Sprintf("m%03d.safetensors", i))
		require.NoError(t, os.WriteFile(p, f, 0o644))
		paths = append(paths, p)
	}
	out := runHostArgs(t, exe, paths, "LD_LIBRARY_PATH="+fake)
	ok := 0
	for i, p := range paths {
		load := block(out, "load", "run", i+1)
		require.Len(t, load, 1, "%s:\n%s", p, out)
		if load[0] == "lum_load_prepared: 0: ok" {
			ok++
			continue
		}
		assert.True(t, strings.HasPrefix(load[0], "lum_load_prepared: 7: lum_load_prepared: "+p+": "), "%s", load[0])
	}
	t.Logf("%d of %d damaged files loaded (their damage was harmless: spaces, a byte of data)", ok, len(paths))
	assert.Contains(t, out, "fake: 0 allocations outstanding, 0 modules loaded, 0 contexts retained, context depth 0\ndone\n")
}
