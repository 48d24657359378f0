package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestServeErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"serve"}, exitUsage, "want: serve DIR"},
		{[]string{"serve", t.TempDir(), "--port", "70000"}, exitUsage, "--port 70000"},
		{[]string{"serve", filepath.Join(t.TempDir(), "none")}, exitInput, "plan.json"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stdout, &stderr)
		require.Equal(t, tc.code, code, "%v: %s", tc.args, stderr.String())
		require.Contains(t, stderr.String(), tc.msg)
	}
}

// syncBuffer is a bytes.Buffer the server's goroutine writes while the
// test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeHelpExample compiles the tiny model of serve's help and serves
// it as the help says, on a free port: a completion comes back, and the
// end of the context (SIGTERM's) drains and exits 0.
func TestServeHelpExample(t *testing.T) {
	skipLong(t)
	dir := filepath.Join(t.TempDir(), "tiny")
	var out, errs bytes.Buffer
	require.Equal(t, exitOK, run(context.Background(), []string{"compile", "../../serve/testdata/tiny-llama2/config.json:step", "--max-tokens", "64", "--max-seq", "128", "--verify=false", "-o", dir}, &out, &errs), errs.String())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"serve", dir, "--port", "0", "--host", "127.0.0.1", "--tokenizer", tokenizerDir(t, "llama2"), "--chat-template", "../../serve/testdata/tiny-llama2/chat_template.jinja"}, &stdout, &stderr)
	}()
	addr := regexp.MustCompile(`on http://(\S+) \(CPU emulation`)
	require.Eventually(t, func() bool { return addr.MatchString(stdout.String()) }, 60*time.Second, 10*time.Millisecond, "%s", stderr.String())
	url := "http://" + addr.FindStringSubmatch(stdout.String())[1]
	res, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"prompt": "Once upon a time", "max_tokens": 4}`))
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, 200, res.StatusCode, "%s", body)
	require.Contains(t, string(body), `"completion_tokens":4`)
	cancel()
	require.Equal(t, exitOK, <-done, "%s", stderr.String())
	require.Contains(t, stdout.String(), "stopped")
}
