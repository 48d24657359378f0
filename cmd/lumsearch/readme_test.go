package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadmeJobOutsideTheModule: the README's main job writes its folder
// (with a generated Go package in go/NAME) where the go tool does not
// look, so that "go test ./..." never picks the generated package up: a
// first path element that starts with "_" or "." or is "testdata".
func TestReadmeJobOutsideTheModule(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	jobs := regexp.MustCompile(`(?m)^\s+go run \./cmd/lumsearch (?:optimize|compile) .*$`).FindAllString(string(readme), -1)
	require.NotEmpty(t, jobs, "the README shows the main job")
	for _, job := range jobs {
		out := regexp.MustCompile(`-o\s+(\S+)`).FindStringSubmatch(job)
		require.NotNil(t, out, "the job names its folder: %s", job)
		first := strings.Split(filepath.ToSlash(filepath.Clean(out[1])), "/")[0]
		assert.True(t, strings.HasPrefix(first, "_") || strings.HasPrefix(first, ".") || first == "testdata",
			"%s writes %s, inside the module's packages", strings.TrimSpace(job), out[1])
	}
}

// TestReadmeJobFolderIsNotAPackage runs the README's main job's command
// with its own -o folder in a scratch module (a tiny model in place of
// the job's, and compile in place of its two-minute search: the folder's
// layout is the same, a generated Go package in go/NAME), then asks the go
// tool: "go list ./..." lists the module's package and nothing under the
// output folder.
func TestReadmeJobFolderIsNotAPackage(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool: %v", err)
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	job := regexp.MustCompile(`(?m)^\s+go run \./cmd/lumsearch optimize .*-o\s+(\S+)`).FindStringSubmatch(string(readme))
	require.NotNil(t, job, "the README shows the main job")
	module := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(module, "go.mod"), []byte("module example.com/scratch\n\ngo 1.26\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(module, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644))
	t.Chdir(module)
	r := runArgs(t, "compile", "tiny-llama:rmsnorm", "--seq", "4", "--verify=false", "-o", job[1])
	require.Zero(t, r.code, r.stderr)
	pkgs, err := filepath.Glob(filepath.Join(module, job[1], "go", "*", "model.go"))
	require.NoError(t, err)
	require.Len(t, pkgs, 1, "the job wrote a Go package")
	cmd := exec.Command(goTool, "list", "./...")
	cmd.Dir = module
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Equal(t, "example.com/scratch", strings.TrimSpace(string(out)), "go list ./... sees only the module's own package")
}
