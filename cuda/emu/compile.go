package emu

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
)

// cacheVersion changes when the way a runner is built changes.
const cacheVersion = "lumsearch-emu-1"

// flags compile the runner. Stack clash protection probes every page of a
// large stack frame, so that a kernel thread outgrowing its fiber stack hits
// the guard page below it instead of another fiber's stack.
var flags = []string{"-std=c++17", "-O1", "-g0", "-pthread", "-fstack-clash-protection"}

// countFlags compile the counting runner's glue (Count): every memory
// access instrumented by GCC's thread sanitizer, whose entry points
// count.inc defines in place of libtsan (function entry and exit are not
// instrumented: the count needs none of them).
var countFlags = []string{"-DLUM_EMU_COUNT", "-fsanitize=thread", "--param=tsan-instrument-func-entry-exit=0"}

var (
	compiles     atomic.Int64 // g++ runs that produced a runner, for tests
	compilerIDs  sync.Map     // compiler name -> identity string
	compileLocks sync.Map     // cache key -> *sync.Mutex
)

// CompileError is a failed g++ run; Log is its output.
type CompileError struct {
	Log string
}

func (e *CompileError) Error() string {
	return "emu: compiling the kernels failed:\n" + tail([]byte(e.Log), 8192)
}

// compilerID identifies the compiler for the cache key: its resolved path and
// what it says its version and target are.
func compilerID(ctx context.Context, cc string) (string, error) {
	if id, ok := compilerIDs.Load(cc); ok {
		return id.(string), nil
	}
	path, err := exec.LookPath(cc)
	if err != nil {
		return "", fmt.Errorf("emu: no C++ compiler: %w", err)
	}
	out, err := exec.CommandContext(ctx, path, "-dumpfullversion", "-dumpmachine").Output()
	if err != nil {
		return "", fmt.Errorf("emu: %s -dumpfullversion: %w", path, err)
	}
	id := path + "\n" + string(out)
	compilerIDs.Store(cc, id)
	return id, nil
}

// compile returns the path of the runner built from source and glue, building
// it when the cache does not hold it yet.
// With counting, the runner is Count's (countFlags).
func compile(ctx context.Context, source, glueSrc string, opt *Options, counting bool) (string, error) {
	cc := opt.Compiler
	if cc == "" {
		cc = "g++"
	}
	dir := opt.CacheDir
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		dir = filepath.Join(base, "lumsearch", "emu")
	}
	id, err := compilerID(ctx, cc)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	parts := []string{cacheVersion, id, strings.Join(flags, " "), header, runnerSource, source, glueSrc}
	if counting {
		parts = append(parts, strings.Join(countFlags, " "), countSource)
	}
	for _, part := range parts {
		fmt.Fprintf(h, "%d\n%s", len(part), part)
	}
	key := hex.EncodeToString(h.Sum(nil))
	bin := filepath.Join(dir, key[:2], key)
	lock, _ := compileLocks.LoadOrStore(key, new(sync.Mutex))
	lock.(*sync.Mutex).Lock()
	defer lock.(*sync.Mutex).Unlock()
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", fmt.Errorf("emu: cache: %w", err)
	}
	work, err := os.MkdirTemp(filepath.Dir(bin), "build-")
	if err != nil {
		return "", fmt.Errorf("emu: cache: %w", err)
	}
	defer os.RemoveAll(work)
	files := map[string]string{"emu.h": header, "runner.inc": runnerSource, "kernels.cu": source, "glue.cc": glueSrc}
	if counting {
		files["count.cc"] = countSource
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(work, name), []byte(text), 0o644); err != nil {
			return "", fmt.Errorf("emu: %w", err)
		}
	}
	var steps [][]string
	if counting {
		// Three runs: the glue instrumented, the hooks not, and a link
		// without libtsan (which -fsanitize=thread would pull in).
		steps = [][]string{
			append(append(append([]string{}, flags...), countFlags...), "-c", "-o", "glue.o", "glue.cc"),
			append(append([]string{}, flags...), "-c", "-o", "count.o", "count.cc"),
			{"-pthread", "-o", "runner", "glue.o", "count.o"},
		}
	} else {
		steps = [][]string{append(append([]string{}, flags...), "-o", "runner", "glue.cc")}
	}
	for _, args := range steps {
		cmd := exec.CommandContext(ctx, cc, args...)
		cmd.Dir = work
		var log bytes.Buffer
		cmd.Stdout, cmd.Stderr = &log, &log
		if err := cmd.Run(); err != nil {
			if ctx.Err() != nil {
				return "", fmt.Errorf("emu: compile stopped: %w", ctx.Err())
			}
			return "", &CompileError{Log: log.String()}
		}
	}
	// The rename is atomic, so another process never runs a partial binary.
	if err := os.Rename(filepath.Join(work, "runner"), bin); err != nil {
		return "", fmt.Errorf("emu: cache: %w", err)
	}
	compiles.Add(1)
	return bin, nil
}
