package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/serve/loadgen"
)

// streamServer is an OpenAI-compatible server on loopback that streams two
// tokens per request, or fails every request with status when it is set.
func streamServer(t *testing.T, status int) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			fmt.Fprint(w, `{"data":[{"id":"fake"}]}`)
			return
		}
		if status != 0 {
			w.WriteHeader(status)
			fmt.Fprint(w, `{"error":{"message":"no such model","type":"NotFoundError"}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choices\":[{\"text\":\"b\"}]}\n\n")
		fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestLoadgen(t *testing.T) {
	url := streamServer(t, 0)
	t.Run("text", func(t *testing.T) {
		r := runArgs(t, "loadgen", "--url", url, "--requests", "4", "--prompt-tokens", "3", "--output-tokens", "2")
		require.Equal(t, exitOK, r.code, r.stderr)
		assert.Contains(t, r.stdout, "model:           fake\n")
		assert.Contains(t, r.stdout, "requests:        4 completed, 0 failed (4 sent of 4)\n")
		assert.Contains(t, r.stdout, "\nTTFT ")
		assert.Empty(t, r.stderr)
	})
	t.Run("json with a workload", func(t *testing.T) {
		work := writeFile(t, "w.jsonl", `{"prompt": "hi", "max_tokens": 2}`+"\n"+`{"prompt_tokens": 3, "output_tokens": 2}`+"\n")
		r := runArgs(t, "loadgen", "--url", url, "--model", "m", "--chat", "--rate", "100", "--arrivals", "fixed", "--concurrency", "1", "--workload", work, "--json")
		require.Equal(t, exitOK, r.code, r.stderr)
		var rep loadgen.Report
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
		assert.Equal(t, 2, rep.Completed, "one request for each line")
		assert.Equal(t, url+"/v1/chat/completions", rep.URL)
		assert.Equal(t, "m", rep.Model)
		assert.Equal(t, 4, rep.OutputTokens)
	})
}

func TestLoadgenErrors(t *testing.T) {
	url := streamServer(t, 0)
	failing := streamServer(t, http.StatusNotFound)
	bad := writeFile(t, "bad.jsonl", `{"prompt": "hi", "max_tokens": 2}`+"\n"+`{"prompt": "hi"}`+"\n")
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
		stdout string
	}{
		{"argument", []string{"x"}, exitUsage, "loadgen takes no arguments", ""},
		{"arrivals", []string{"--url", url, "--rate", "2", "--arrivals", "burst"}, exitUsage, `arrivals "burst"`, ""},
		{"rate", []string{"--url", url, "--rate", "-1"}, exitUsage, "rate -1", ""},
		{"url", []string{"--url", "127.0.0.1:8000"}, exitUsage, "want a base URL", ""},
		{"workload and lengths", []string{"--workload", bad, "--output-tokens", "3"}, exitUsage, "without --prompt-tokens and --output-tokens", ""},
		{"workload line", []string{"--url", url, "--workload", bad}, exitInput, bad + ":2: want a positive output_tokens", ""},
		{"workload missing", []string{"--workload", filepath.Join(t.TempDir(), "none.jsonl")}, exitInput, "none.jsonl", ""},
		{"failed requests", []string{"--url", failing, "--requests", "2"}, exitError,
			"2 of 2 requests failed; the first: HTTP 404: no such model (NotFoundError)", "requests:        0 completed, 2 failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runArgs(t, append([]string{"loadgen"}, tt.args...)...)
			assert.Equal(t, tt.code, r.code, r.stderr)
			assert.Contains(t, r.stderr, tt.stderr)
			assert.Contains(t, r.stdout, tt.stdout)
		})
	}
}

// TestLoadgenInterrupted: Ctrl-C prints the partial report, then fails.
func TestLoadgenInterrupted(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.(http.Flusher).Flush()
		<-r.Context().Done() // a server that never answers
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"loadgen", "--url", srv.URL, "--model", "m", "--requests", "2"}, &stdout, &stderr)
	assert.Equal(t, exitError, code)
	assert.Contains(t, stdout.String(), "0 completed, 0 failed, 2 canceled (2 sent of 2)")
	assert.Contains(t, stdout.String(), "interrupted:")
	assert.Contains(t, stderr.String(), "interrupted after 2 of 2 requests sent: context deadline exceeded")
}
