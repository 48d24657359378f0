package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ac4 is the committed AC-4 fixture of the egraph package, seen from here.
var ac4 = filepath.Join("..", "..", "egraph", "testdata", "ac4.json")

// Sizes of ac4.json after rebuilding.
const (
	ac4Classes = 15
	ac4Nodes   = 54
)

// result is what one call of run produced.
type result struct {
	code           int
	stdout, stderr string
}

// runArgs calls run as the command line would.
func runArgs(t *testing.T, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// writeFile writes content to name in a fresh temporary folder.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	return path
}

func TestEgraphText(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"file only", []string{"egraph", ac4}},
		{"flag after file", []string{"egraph", ac4, "--dot", ""}},
		{"double-dash end of flags", []string{"egraph", "--", ac4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runArgs(t, tt.args...)
			require.Equal(t, exitOK, r.code, r.stderr)
			assert.Empty(t, r.stderr)
			assert.Contains(t, r.stdout, "file:      "+ac4+"\n")
			assert.Contains(t, r.stdout, fmt.Sprintf("e-classes: %d\n", ac4Classes))
			assert.Contains(t, r.stdout, fmt.Sprintf("e-nodes:   %d\n", ac4Nodes))
			assert.Contains(t, r.stdout, "roots:     1 (6)\n")
			assert.Contains(t, r.stdout, "operators: 5\n")
			assert.Contains(t, r.stdout, "load time: ")
			assert.NotContains(t, r.stdout, "dot:")
		})
	}
}

func TestEgraphJSON(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"flag before file", []string{"egraph", "--json", ac4}},
		{"flag after file", []string{"egraph", ac4, "--json"}},
		{"single dash", []string{"egraph", ac4, "-json"}},
		{"explicit value", []string{"egraph", ac4, "--json=true"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runArgs(t, tt.args...)
			require.Equal(t, exitOK, r.code, r.stderr)
			var got map[string]any
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &got), r.stdout)
			assert.Equal(t, ac4, got["file"])
			assert.EqualValues(t, ac4Classes, got["eclasses"])
			assert.EqualValues(t, ac4Nodes, got["enodes"])
			assert.Equal(t, []any{"6"}, got["roots"])
			assert.EqualValues(t, 5, got["operators"])
			assert.Contains(t, got, "load_seconds")
			assert.NotContains(t, got, "dot")
		})
	}
}

func TestEgraphDot(t *testing.T) {
	tests := []struct {
		name string
		args func(out string) []string
	}{
		{"flags after file", func(out string) []string { return []string{"egraph", ac4, "--dot", out} }},
		{"flags before file", func(out string) []string { return []string{"egraph", "-dot=" + out, ac4} }},
		{"with json", func(out string) []string { return []string{"egraph", ac4, "--dot", out, "--json"} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "ac4.dot")
			r := runArgs(t, tt.args(out)...)
			require.Equal(t, exitOK, r.code, r.stderr)
			assert.Contains(t, r.stdout, out)
			data, err := os.ReadFile(out)
			require.NoError(t, err)
			assert.True(t, strings.HasPrefix(string(data), "digraph"), "dot file starts %.40q", data)
			assert.Equal(t, ac4Nodes, strings.Count(string(data), "[label="), "one box per e-node")
		})
	}
}

func TestEgraphDotTooBig(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"nodes": {`)
	const n = 2001
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"n%d": {"op": "x%d", "eclass": "c%d", "children": []}`, i, i, i)
	}
	b.WriteString(`}}`)
	in := writeFile(t, "big.json", b.String())
	out := filepath.Join(t.TempDir(), "big.dot")

	r := runArgs(t, "egraph", in, "--dot", out)
	assert.Equal(t, exitError, r.code)
	assert.Empty(t, r.stdout)
	assert.Contains(t, r.stderr, "lumsearch: egraph: ")
	assert.Contains(t, r.stderr, out)
	assert.Contains(t, r.stderr, "2001 e-nodes, more than the limit of 2000")
	assert.NoFileExists(t, out, "a refused drawing leaves no file")

	r = runArgs(t, "egraph", in) // without --dot the size is fine
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "e-nodes:   2001\n")
}

func TestEgraphErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.json")
	badOp := writeFile(t, "bad-op.json", `{"nodes": {"a": {"op": 3}}}`)
	notJSON := writeFile(t, "not.json", `{"nodes": `)
	tests := []struct {
		name     string
		args     []string
		code     int
		contains []string
	}{
		{"missing file", []string{"egraph", missing}, exitError,
			[]string{"lumsearch: egraph: ", missing, "no such file"}},
		{"wrong type", []string{"egraph", badOp}, exitError,
			[]string{"lumsearch: egraph: ", badOp, `$.nodes["a"].op`}},
		{"truncated", []string{"egraph", notJSON, "--json"}, exitError,
			[]string{"lumsearch: egraph: ", notJSON}},
		{"dot into missing folder", []string{"egraph", ac4, "--dot", filepath.Join(dir, "no", "x.dot")}, exitError,
			[]string{"lumsearch: egraph: write dot: "}},
		{"no file", []string{"egraph"}, exitUsage,
			[]string{"lumsearch: egraph: missing FILE.json", "lumsearch egraph -h"}},
		{"two files", []string{"egraph", ac4, ac4}, exitUsage,
			[]string{"lumsearch: egraph: want one FILE.json, got 2 arguments"}},
		{"unknown flag", []string{"egraph", ac4, "--bogus"}, exitUsage,
			[]string{"lumsearch: egraph: flag provided but not defined: -bogus"}},
		{"flag without value", []string{"egraph", ac4, "--dot"}, exitUsage,
			[]string{"lumsearch: egraph: flag needs an argument: -dot"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runArgs(t, tt.args...)
			assert.Equal(t, tt.code, r.code)
			assert.Empty(t, r.stdout)
			assert.True(t, strings.HasPrefix(r.stderr, "lumsearch: "), r.stderr)
			for _, s := range tt.contains {
				assert.Contains(t, r.stderr, s)
			}
		})
	}
}

func TestEgraphCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"egraph", ac4}, &stdout, &stderr)
	assert.Equal(t, exitError, code)
	assert.Empty(t, stdout.String())
	assert.Contains(t, stderr.String(), "context canceled")
}

func TestCommandLine(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		code       int
		stdout     []string // substrings of stdout
		stderr     []string // substrings of stderr
		noStdout   bool
		emptyError bool
	}{
		{name: "no arguments", args: nil, code: exitUsage,
			stderr: []string{"Usage: lumsearch <command>", "egraph", "version", "help"}, noStdout: true},
		{name: "unknown command", args: []string{"superoptimize", "model.onnx"}, code: exitUsage,
			stderr: []string{`lumsearch: unknown command "superoptimize"`, "optimize, corpus, egraph, extract, rules, version, help"}, noStdout: true},
		{name: "help", args: []string{"help"}, code: exitOK,
			stdout: []string{"Usage: lumsearch <command>", "egraph", "version", "Example:"}, emptyError: true},
		{name: "-h", args: []string{"-h"}, code: exitOK,
			stdout: []string{"Usage: lumsearch <command>"}, emptyError: true},
		{name: "--help", args: []string{"--help"}, code: exitOK,
			stdout: []string{"Usage: lumsearch <command>"}, emptyError: true},
		{name: "help egraph", args: []string{"help", "egraph"}, code: exitOK,
			stdout:     []string{"Usage: lumsearch egraph FILE.json", "-dot OUT.dot", "-json", "Example:\n  lumsearch egraph "},
			emptyError: true},
		{name: "egraph -h", args: []string{"egraph", "-h"}, code: exitOK,
			stdout: []string{"Usage: lumsearch egraph FILE.json", "Example:\n  lumsearch egraph "}, emptyError: true},
		{name: "egraph FILE --help", args: []string{"egraph", ac4, "--help"}, code: exitOK,
			stdout: []string{"Usage: lumsearch egraph FILE.json"}, emptyError: true},
		{name: "version -h", args: []string{"version", "-h"}, code: exitOK,
			stdout: []string{"Usage: lumsearch version", "Example:\n  lumsearch version"}, emptyError: true},
		{name: "help -h", args: []string{"help", "-h"}, code: exitOK,
			stdout: []string{"Usage: lumsearch help [COMMAND]", "Example:\n  lumsearch help"}, emptyError: true},
		{name: "help unknown", args: []string{"help", "nope"}, code: exitUsage,
			stderr: []string{`lumsearch: help: unknown command "nope"`}, noStdout: true},
		{name: "version", args: []string{"version"}, code: exitOK,
			stdout: []string{"lumsearch ", "go1."}, emptyError: true},
		{name: "version with argument", args: []string{"version", "x"}, code: exitUsage,
			stderr: []string{"lumsearch: version: version takes no arguments"}, noStdout: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runArgs(t, tt.args...)
			assert.Equal(t, tt.code, r.code, "stderr: %s", r.stderr)
			for _, s := range tt.stdout {
				assert.Contains(t, r.stdout, s)
			}
			for _, s := range tt.stderr {
				assert.Contains(t, r.stderr, s)
			}
			if tt.noStdout {
				assert.Empty(t, r.stdout)
			}
			if tt.emptyError {
				assert.Empty(t, r.stderr)
			}
		})
	}
}

func TestEveryCommandHasHelpWithExample(t *testing.T) {
	for _, c := range commands {
		t.Run(c.name, func(t *testing.T) {
			r := runArgs(t, c.name, "-h")
			require.Equal(t, exitOK, r.code)
			assert.True(t, strings.HasPrefix(r.stdout, "Usage: lumsearch "+c.name), r.stdout)
			assert.Contains(t, r.stdout, "\nExample:\n  lumsearch "+c.name)
			assert.Contains(t, runArgs(t, "help").stdout, "  "+c.name+" ")
		})
	}
}

func TestParseInterspersed(t *testing.T) {
	tests := []struct {
		name string
		args []string
		pos  []string
		json bool
		dot  string
	}{
		{"empty", nil, nil, false, ""},
		{"positional only", []string{"a", "b"}, []string{"a", "b"}, false, ""},
		{"mixed", []string{"a", "--json", "b", "--dot", "o.dot"}, []string{"a", "b"}, true, "o.dot"},
		{"terminator", []string{"--json", "--", "--dot", "x"}, []string{"--dot", "x"}, true, ""},
		{"terminator after positional", []string{"a", "--", "-json"}, []string{"a", "-json"}, false, ""},
		{"lone dash is positional", []string{"-", "--json"}, []string{"-"}, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs, _ := egraphCommand.flagSet()
			pos, err := parseInterspersed(fs, tt.args)
			require.NoError(t, err)
			assert.Equal(t, tt.pos, pos)
			assert.Equal(t, fmt.Sprint(tt.json), fs.Lookup("json").Value.String())
			assert.Equal(t, tt.dot, fs.Lookup("dot").Value.String())
		})
	}
}
