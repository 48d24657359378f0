package main

import (
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/internal/outdir"
	"github.com/lumsearch/lumsearch/plan"
)

// TestVerifyDir verifies the compiled folder the tests share, then damages
// copies of it in several ways that each must fail the verification: an
// edit the digests catch, and edits written back with fresh digests (as a
// buggy lumsearch would write them) that the later checks catch, the
// reprinted kernels and the emulation against the reference.
func TestVerifyDir(t *testing.T) {
	// Parallel: among the package's longest tests; the default tuning
	// database is TestMain's empty one.
	t.Parallel()
	dir, _ := compiledDecode(t)
	r := runArgs(t, "verify", dir)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^  kernels.cu: each of its \d+ distinct kernels is what its body and schedule print$`, r.stdout)
	assert.Regexp(t, `(?m)^  verify: \d+ distinct kernels at their real shapes`, r.stdout)
	assert.Regexp(t, `(?m)^  verify: the whole program, as the folder holds it, matches the reference interpreter`, r.stdout)

	src, err := os.ReadFile(filepath.Join(dir, "kernels.cu"))
	require.NoError(t, err)
	edited := strings.Replace(string(src), "__syncthreads();", "__syncthreads(); __syncthreads();", 1)
	require.NotEqual(t, string(src), edited)
	writeKernels := func(t *testing.T, d string) {
		require.NoError(t, os.WriteFile(filepath.Join(d, "kernels.cu"), []byte(edited), 0o644))
	}
	// swap runs the last launch first: what it reads is not written yet.
	swap := func(p *plan.Plan) {
		require.Greater(t, len(p.Run), 1)
		p.Run[0], p.Run[len(p.Run)-1] = p.Run[len(p.Run)-1], p.Run[0]
	}

	for _, c := range []struct {
		name   string
		damage func(t *testing.T, d string)
		code   int
		want   string
	}{
		{"edited kernel", writeKernels, exitError, "kernels.cu was changed"},
		{"edited kernel, resealed", func(t *testing.T, d string) {
			writeKernels(t, d)
			reseal(t, d, func(*plan.Plan) {})
		}, exitError, "is not what its body and schedule"},
		{"swapped launches", func(t *testing.T, d string) {
			p, err := plan.Read(d)
			require.NoError(t, err)
			swap(p)
			require.NoError(t, p.Write(d))
		}, exitError, "does not match its own digest"},
		{"swapped launches, resealed", func(t *testing.T, d string) {
			reseal(t, d, swap)
		}, exitError, "differs from the reference"},
		{"missing constants", func(t *testing.T, d string) {
			require.NoError(t, os.Remove(filepath.Join(d, "constants.safetensors")))
		}, exitError, "constants.safetensors is missing"},
		{"added file", func(t *testing.T, d string) {
			require.NoError(t, os.WriteFile(filepath.Join(d, "notes.txt"), []byte("mine\n"), 0o644))
		}, exitError, "notes.txt was added"},
		{"no plan", func(t *testing.T, d string) {
			require.NoError(t, os.Remove(filepath.Join(d, "plan.json")))
		}, exitInput, "plan.json"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := filepath.Join(t.TempDir(), "copy")
			require.NoError(t, os.CopyFS(d, os.DirFS(dir)))
			c.damage(t, d)
			r := runArgs(t, "verify", d)
			assert.Equal(t, c.code, r.code, r.stdout+r.stderr)
			assert.Contains(t, r.stderr, c.want)
		})
	}
}

// reseal applies edit to folder d's plan and writes the folder back as
// lumsearch writes one: the Go package's copies of the plan follow it,
// every file's digest is taken again, and plan.json is sealed. It also
// says another NVRTC compiled the kernels, so that verify relies on the
// digests rather than compiling kernels.cu again (which an edited
// kernels.cu fails first): what verify then finds is up to its checks
// past the files, the reprinted kernels and the emulation.
func reseal(t *testing.T, d string, edit func(*plan.Plan)) {
	t.Helper()
	p, err := plan.Read(d)
	require.NoError(t, err)
	require.NotEmpty(t, p.Files)
	if p.NVRTC != nil {
		p.NVRTC.Version = "0.1"
	}
	edit(p)
	cp := *p
	cp.Files, cp.Digest = nil, ""
	copyText, err := cp.Encode()
	require.NoError(t, err)
	for rel := range p.Files {
		if strings.HasPrefix(rel, "go/") && path.Base(rel) == plan.FileName {
			require.NoError(t, os.WriteFile(filepath.Join(d, filepath.FromSlash(rel)), copyText, 0o644))
		}
	}
	for rel := range p.Files {
		p.Files[rel], err = outdir.DigestFile(filepath.Join(d, filepath.FromSlash(rel)))
		require.NoError(t, err)
	}
	sealed, err := p.Seal()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(d, plan.FileName), sealed, 0o644))
}
