package loadgen

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseWorkloadLine(t *testing.T) {
	tests := []struct {
		line string
		want Request
		err  string // a substring of the error; empty for none
	}{
		{`{"prompt": "Hi there", "max_tokens": 16}`, Request{Prompt: "Hi there", OutputTokens: 16}, ""},
		{`{"prompt_tokens": 512, "output_tokens": 128}`, Request{PromptTokens: 512, OutputTokens: 128}, ""},
		{`{"prompt": "x", "output_tokens": 3}`, Request{Prompt: "x", OutputTokens: 3}, ""},
		{`{"prompt_tokens": 4, "max_tokens": 2}`, Request{PromptTokens: 4, OutputTokens: 2}, ""},
		{`{"prompt": "x"}`, Request{}, "want a positive output_tokens (or max_tokens), got 0"},
		{`{"max_tokens": 2}`, Request{}, "want a prompt or a positive prompt_tokens"},
		{`{"prompt": "", "max_tokens": 2}`, Request{}, "empty prompt"},
		{`{"prompt": "x", "prompt_tokens": 3, "max_tokens": 2}`, Request{}, "prompt and prompt_tokens both given"},
		{`{"prompt_tokens": 0, "max_tokens": 2}`, Request{}, "prompt_tokens 0: want a positive count"},
		{`{"prompt_tokens": -5, "max_tokens": 2}`, Request{}, "prompt_tokens -5"},
		{`{"prompt": "x", "max_tokens": -1}`, Request{}, "got -1"},
		{`{"prompt": "x", "max_tokens": 2, "output_tokens": 2}`, Request{}, "max_tokens and output_tokens both given"},
		{`{"prompt": "x", "max_token": 2}`, Request{}, `unknown field "max_token"`},
		{`{"prompt": "x", "max_tokens": 2.5}`, Request{}, "want a JSON object"},
		{`{"prompt": 7, "max_tokens": 2}`, Request{}, "want a JSON object"},
		{`["prompt"]`, Request{}, "want a JSON object"},
		{`{"prompt": "x", "max_tokens": 2} {}`, Request{}, "text after the JSON object"},
		{`{"prompt": "x", "max_tokens": 2} x`, Request{}, "text after the JSON object"},
		{`{"prompt": "x", "max_tokens": 2`, Request{}, "want a JSON object"},
		{`null`, Request{}, "want a prompt"},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			got, err := parseWorkloadLine([]byte(tt.line))
			if tt.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestReadWorkload(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
		return path
	}
	tests := []struct {
		name    string
		content string
		want    []Request
		err     string // with "PATH" for the file's path
	}{
		{"two lines and blanks", "{\"prompt\": \"a\", \"max_tokens\": 1}\n\n  \r\n{\"prompt_tokens\": 2, \"output_tokens\": 3}\n",
			[]Request{{Prompt: "a", OutputTokens: 1}, {PromptTokens: 2, OutputTokens: 3}}, ""},
		{"crlf", "{\"prompt\": \"a\", \"max_tokens\": 1}\r\n", []Request{{Prompt: "a", OutputTokens: 1}}, ""},
		{"error names the line", "{\"prompt\": \"a\", \"max_tokens\": 1}\n\n{\"prompt\": \"b\"}\n", nil, "PATH:3: want a positive output_tokens"},
		{"bad json on line 1", "prompt: a\n", nil, "PATH:1: want a JSON object"},
		{"empty", "\n\n", nil, "workload PATH: no requests"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := write(strings.Repeat("w", i+1)+".jsonl", tt.content)
			got, err := ReadWorkload(path)
			if tt.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), strings.ReplaceAll(tt.err, "PATH", path))
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
	t.Run("missing file", func(t *testing.T) {
		_, err := ReadWorkload(filepath.Join(dir, "none.jsonl"))
		require.Error(t, err)
		assert.Contains(t, err.Error(), "none.jsonl")
	})
}

func TestRequestText(t *testing.T) {
	tests := []struct {
		req  Request
		i    int
		want string
	}{
		{Request{Prompt: "Hi", OutputTokens: 1}, 3, "Hi"},
		{Request{PromptTokens: 1, OutputTokens: 1}, 0, "0"},
		{Request{PromptTokens: 4, OutputTokens: 1}, 12, "12 hello hello hello"},
	}
	for _, tt := range tests {
		got := tt.req.text(tt.i)
		assert.Equal(t, tt.want, got)
		if tt.req.Prompt == "" {
			assert.Len(t, strings.Fields(got), tt.req.PromptTokens, "one word per prompt token")
		}
	}
}

// FuzzParseWorkloadLine: any line is a valid request or an error, never a
// panic, and a request accepted is one Run accepts.
func FuzzParseWorkloadLine(f *testing.F) {
	for _, seed := range []string{
		`{"prompt": "Hi", "max_tokens": 16}`,
		`{"prompt_tokens": 512, "output_tokens": 128}`,
		`{"prompt": "x", "prompt_tokens": 1, "max_tokens": 1}`,
		`{"prompt_tokens": 1e3, "output_tokens": -1}`,
		`{}`, `[]`, `null`, `"x"`, ``, `{"prompt": "\u0000"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := parseWorkloadLine(line)
		if err != nil {
			assert.Equal(t, Request{}, r)
			return
		}
		require.NoError(t, r.validate())
		assert.Positive(t, r.OutputTokens)
		assert.True(t, (r.Prompt == "") != (r.PromptTokens == 0), "a prompt or a length, not both: %+v", r)
	})
}
