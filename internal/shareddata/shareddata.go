// Package shareddata locates the public test data that sits beside the
// project checkout (../shared/data: ONNX conformance cases, extraction-gym
// e-graphs). Tests skip when it is absent, as in a user's clone, unless the
// environment variable LUMSEARCH_REQUIRE_DATA=1 makes them fail, which CI
// sets so that it always runs them.
package shareddata

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// RequireEnv is the environment variable that turns a missing-data skip
// into a failure.
const RequireEnv = "LUMSEARCH_REQUIRE_DATA"

// DirEnv overrides where the data is looked for.
const DirEnv = "LUMSEARCH_DATA"

// Dir returns the shared data folder, or skips (or fails, under RequireEnv)
// when it is not there.
func Dir(t testing.TB) string {
	t.Helper()
	dir, err := Locate()
	if err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("%v; failing because %s=1", err, RequireEnv)
		}
		t.Skipf("%v; skipping (set %s=1 to fail instead)", err, RequireEnv)
	}
	return dir
}

// Locate finds the shared data folder: $LUMSEARCH_DATA if set, else
// ../shared/data beside the module root found from the working directory.
func Locate() (string, error) {
	if d := os.Getenv(DirEnv); d != "" {
		return checkDir(d)
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("locate shared test data: %w", err)
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return checkDir(filepath.Join(dir, "..", "shared", "data"))
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("locate shared test data: no go.mod above %s", wd)
		}
		dir = parent
	}
}

func checkDir(d string) (string, error) {
	abs, err := filepath.Abs(d)
	if err != nil {
		return "", fmt.Errorf("locate shared test data: %w", err)
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("shared test data not found at %s (it sits beside the project checkout; see shared/data/README.md)", abs)
	}
	return abs, nil
}
