package measure

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// Client sends requests to a worker process and keeps one running: a
// worker that exceeds Timeout on a request is killed, one that exits is
// reaped, and either is started again for the next request, the request
// it failed on answered with the reason. It is safe for concurrent use;
// requests go one at a time.
type Client struct {
	// Command starts a worker (for example "lumsearch worker --measure
	// emulated"); it is called for every start.
	Command func() *exec.Cmd
	// Timeout bounds one request (0: one minute).
	Timeout time.Duration

	mu       sync.Mutex
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	lines    chan string
	stderr   *strings.Builder
	restarts int
}

// Restarts is how many times a worker was started after the first.
func (c *Client) Restarts() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.restarts
}

func (c *Client) start() error {
	cmd := c.Command()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	c.stderr = &strings.Builder{}
	cmd.Stderr = &lockedWriter{w: c.stderr}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start worker: %w", err)
	}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	c.cmd, c.stdin, c.lines = cmd, stdin, lines
	return nil
}

// stop kills the worker and reaps it.
func (c *Client) stop() {
	if c.cmd == nil {
		return
	}
	_ = c.stdin.Close()
	_ = c.cmd.Process.Kill()
	for range c.lines {
	}
	_ = c.cmd.Wait()
	c.cmd = nil
}

// Close stops the worker.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stop()
	return nil
}

// Measure sends one request and waits for its answer. A worker that hangs
// or dies on it costs this request only: the response says what happened
// (OK false) and the next request starts a fresh worker. An error is
// returned only when no worker can be started or ctx ends.
func (c *Client) Measure(ctx context.Context, req Request) (Response, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		if err := c.start(); err != nil {
			return Response{}, err
		}
	}
	line, err := json.Marshal(req)
	if err != nil {
		return Response{}, err
	}
	if _, err := c.stdin.Write(append(line, '\n')); err != nil {
		c.restart()
		return lost(req.ID, "worker gone before the request was sent: %v", err), nil
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case l, ok := <-c.lines:
		if !ok {
			msg := c.exitReason()
			c.restart()
			return lost(req.ID, "worker exited during the request: %s", msg), nil
		}
		var resp Response
		if err := json.Unmarshal([]byte(l), &resp); err != nil || resp.ID != req.ID {
			c.restart()
			return lost(req.ID, "worker answered out of protocol: %q", l), nil
		}
		return resp, nil
	case <-timer.C:
		c.restart()
		return lost(req.ID, "timed out after %v; worker killed", timeout), nil
	case <-ctx.Done():
		c.restart()
		return Response{}, ctx.Err()
	}
}

// restart stops the worker; the next request starts another.
func (c *Client) restart() {
	c.stop()
	c.restarts++
}

// exitReason describes how the worker ended: its exit status and the end
// of what it wrote to stderr.
func (c *Client) exitReason() string {
	err := c.cmd.Wait()
	var ee *exec.ExitError
	status := "exit status 0"
	if errors.As(err, &ee) {
		status = ee.String()
	}
	c.cmd = nil
	tail := strings.TrimSpace(c.stderr.String())
	if len(tail) > 400 {
		tail = tail[len(tail)-400:]
	}
	if tail != "" {
		return status + ": " + tail
	}
	return status
}

// lockedWriter serializes the writes exec's stderr copier makes.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
