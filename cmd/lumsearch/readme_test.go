package main

import (
	"os"
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
