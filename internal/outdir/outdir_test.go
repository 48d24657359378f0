package outdir

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// content is a folder's files and their bytes.
type content map[string]string

// read reads every file under dir ("" for a missing dir: nil).
func read(t *testing.T, dir string) content {
	t.Helper()
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	files, err := Walk(dir, nil)
	require.NoError(t, err)
	c := content{}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(f)))
		require.NoError(t, err)
		c[f] = string(data)
	}
	return c
}

// writeAll writes c through the stage, a step between files.
func writeAll(c content) func(*Stage) error {
	return func(s *Stage) error {
		for _, name := range sortedNames(c) {
			if err := s.WriteFile(name, []byte(c[name])); err != nil {
				return err
			}
			if err := s.Step("after " + name); err != nil {
				return err
			}
		}
		return nil
	}
}

func sortedNames(c content) []string { return slices.Sorted(maps.Keys(c)) }

// randomContent is a folder of a few files, some in sub-folders, with
// seeded random bytes.
func randomContent(r *rand.Rand, tag string) content {
	c := content{"marker": tag}
	for i := range 2 + r.IntN(4) {
		name := fmt.Sprintf("f%d.bin", i)
		if r.IntN(2) == 0 {
			name = fmt.Sprintf("sub%d/%s", r.IntN(2), name)
		}
		b := make([]byte, r.IntN(300))
		for j := range b {
			b[j] = byte(r.IntN(256))
		}
		c[name] = string(b)
	}
	return c
}

func ownedByMarker(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "marker")); err != nil {
		return fmt.Errorf("%s was not written by this test", dir)
	}
	return nil
}

// TestReplaceEveryStep fails the write at every step in turn, new folder
// and replaced folder alike, and checks at each step that the folder is
// whole (old or new, never mixed), that a failure leaves the old one and
// no sibling, and that a missing folder stays missing.
func TestReplaceEveryStep(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 4))
	for _, existed := range []bool{false, true} {
		t.Run(fmt.Sprintf("existed=%v", existed), func(t *testing.T) {
			oldC, newC := randomContent(r, "old"), randomContent(r, "new")
			// Count the steps of a whole write.
			var steps []string
			probe := filepath.Join(t.TempDir(), "out")
			require.NoError(t, Replace(probe, Options{Hook: func(step string) error { steps = append(steps, step); return nil }}, writeAll(newC)))
			require.Equal(t, newC, read(t, probe))
			require.Greater(t, len(steps), len(newC))
			for failAt := range steps {
				parent := t.TempDir()
				dir := filepath.Join(parent, "out")
				var want content
				if existed {
					require.NoError(t, Replace(dir, Options{}, writeAll(oldC)))
					want = oldC
				}
				i := 0
				hook := func(step string) error {
					got := read(t, dir)
					if step == "done" {
						assert.Equal(t, newC, got, "after the swap")
					} else {
						assert.Equal(t, want, got, "at step %s", step)
					}
					if i == failAt {
						return errors.New("disk full")
					}
					i++
					return nil
				}
				err := Replace(dir, Options{Owned: ownedByMarker, Hook: hook}, writeAll(newC))
				require.Error(t, err)
				if steps[failAt] == "done" {
					assert.Equal(t, newC, read(t, dir))
				} else {
					assert.Equal(t, want, read(t, dir), "a failure at %s leaves the old folder", steps[failAt])
				}
				entries, err := os.ReadDir(parent)
				require.NoError(t, err)
				if want == nil && steps[failAt] != "done" {
					assert.Empty(t, entries, "a failure at %s leaves nothing", steps[failAt])
				} else {
					assert.Len(t, entries, 1, "a failure at %s leaves one folder, no staging sibling", steps[failAt])
				}
			}
		})
	}
}

// TestReplaceOwnership: an existing folder is replaced only when empty
// or owned; a file in the way is refused.
func TestReplaceOwnership(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(dir string)
		owned   func(string) error
		wantErr string
	}{
		{"missing", func(string) {}, nil, ""},
		{"empty folder", func(dir string) { os.Mkdir(dir, 0o755) }, nil, ""},
		{"foreign folder", func(dir string) {
			os.Mkdir(dir, 0o755)
			os.WriteFile(filepath.Join(dir, "thesis.tex"), []byte("x"), 0o644)
		}, ownedByMarker, "not written by this test"},
		{"foreign folder, no owner check", func(dir string) {
			os.Mkdir(dir, 0o755)
			os.WriteFile(filepath.Join(dir, "thesis.tex"), []byte("x"), 0o644)
		}, nil, "is not empty"},
		{"owned folder", func(dir string) {
			os.Mkdir(dir, 0o755)
			os.WriteFile(filepath.Join(dir, "marker"), []byte("old"), 0o644)
			os.WriteFile(filepath.Join(dir, "stale"), []byte("x"), 0o644)
		}, ownedByMarker, ""},
		{"a file", func(dir string) { os.WriteFile(dir, []byte("x"), 0o644) }, ownedByMarker, "not a folder"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "out")
			tc.setup(dir)
			before := read(t, dir)
			o := Options{Owned: tc.owned}
			checkErr := Check(dir, o)
			err := Replace(dir, o, writeAll(content{"marker": "new"}))
			if tc.wantErr != "" {
				require.ErrorContains(t, checkErr, tc.wantErr)
				require.ErrorContains(t, err, tc.wantErr)
				if st, err := os.Stat(dir); err == nil && st.IsDir() {
					assert.Equal(t, before, read(t, dir))
				}
				return
			}
			require.NoError(t, checkErr)
			require.NoError(t, err)
			assert.Equal(t, content{"marker": "new"}, read(t, dir), "nothing of the old folder stays")
		})
	}
}

// TestCheckCreatesNothing: checking a folder under missing parents
// creates none of them.
func TestCheckCreatesNothing(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, Check(filepath.Join(root, "a", "b", "out"), Options{}))
	entries, err := os.ReadDir(root)
	require.NoError(t, err)
	assert.Empty(t, entries)
}

// TestDigests: the recorded digests are those of the files as written.
func TestDigests(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	c := randomContent(rand.New(rand.NewPCG(5, 6)), "x")
	var digests map[string]string
	require.NoError(t, Replace(dir, Options{}, func(s *Stage) error {
		if err := writeAll(c)(s); err != nil {
			return err
		}
		digests = s.Digests()
		return nil
	}))
	require.Len(t, digests, len(c))
	for name := range c {
		d, err := DigestFile(filepath.Join(dir, filepath.FromSlash(name)))
		require.NoError(t, err)
		assert.Equal(t, d, digests[name], name)
		assert.True(t, strings.HasPrefix(d, "sha256:"))
	}
}

// TestStaleStagingRemoved: a staging sibling whose writer is gone (a
// killed run) is removed by the next write beside it; a live writer's is
// kept.
func TestStaleStagingRemoved(t *testing.T) {
	parent := t.TempDir()
	dead := filepath.Join(parent, stagePrefix("out")+"999999999-123")
	live := filepath.Join(parent, stagePrefix("out")+fmt.Sprint(os.Getppid())+"-456")
	require.NoError(t, os.Mkdir(dead, 0o755))
	require.NoError(t, os.Mkdir(live, 0o755))
	require.NoError(t, Replace(filepath.Join(parent, "out"), Options{}, writeAll(content{"marker": "x"})))
	assert.NoDirExists(t, dead)
	assert.DirExists(t, live)
}

// TestFailedWriteLeavesNoFolders: a failed write under folders that did
// not exist removes them again.
func TestFailedWriteLeavesNoFolders(t *testing.T) {
	root := t.TempDir()
	err := Replace(filepath.Join(root, "a", "b", "out"), Options{}, func(s *Stage) error {
		if err := s.WriteFile("x", []byte("x")); err != nil {
			return err
		}
		return errors.New("no space left on device")
	})
	require.ErrorContains(t, err, "no space left")
	entries, err := os.ReadDir(root)
	require.NoError(t, err)
	assert.Empty(t, entries)
	require.NoError(t, Replace(filepath.Join(root, "a", "b", "out"), Options{}, writeAll(content{"marker": "x"})))
	assert.Equal(t, content{"marker": "x"}, read(t, filepath.Join(root, "a", "b", "out")))
}
