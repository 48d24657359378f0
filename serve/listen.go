package serve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lumsearch/lumsearch/gpu"
)

// FolderOptions say how to serve a compiled folder.
type FolderOptions struct {
	// Host and Port are where to listen (Port 0: any free port).
	Host string
	Port int
	// ServedModelName is the model's name in the API (default: the
	// Hugging Face folder's name, else the model as plan.json names it).
	ServedModelName string
	// Tokenizer is a tokenizer.json, or a folder holding one, used
	// instead of the model folder's.
	Tokenizer string
	// ChatTemplate is a Jinja chat template file (or a
	// tokenizer_config.json holding one) used instead of the tokenizer's.
	ChatTemplate string
	// Batcher tunes the scheduler.
	Batcher Options
	// Drain bounds how long a shutdown lets requests in flight finish
	// (0: 30 s).
	Drain time.Duration
	// Ready, when set, is called with the address once the server
	// listens.
	Ready func(addr string)
	// Device is where the step runs: DeviceGPU, DeviceEmulated, or
	// DeviceAuto ("": a GPU when there is one, else the emulation).
	Device string
}

// Where a served step runs.
const (
	DeviceAuto     = "auto"
	DeviceGPU      = "gpu"
	DeviceEmulated = "emulated"
)

// folderEngine is an engine over a compiled folder.
type folderEngine interface {
	Engine
	ModelFolder() string
	Model() string
	Close() error
}

// openEngine opens dir where o says: on auto, the emulation serves when no
// GPU can (logged, with the reason).
func openEngine(ctx context.Context, dir, device string, logf func(string, ...any)) (folderEngine, error) {
	switch device {
	case DeviceEmulated:
		return OpenFolder(ctx, dir)
	case DeviceGPU:
		return OpenGPU(ctx, dir)
	case DeviceAuto, "":
		// Asked first, so that a machine without a GPU reads the folder
		// once.
		d, err := gpu.Open()
		if err == nil {
			_, err = d.Device(0)
		}
		if errors.Is(err, gpu.ErrNoDevice) {
			logf("no GPU (%v): the step runs under the CPU emulation", err)
			return OpenFolder(ctx, dir)
		}
		return OpenGPU(ctx, dir)
	}
	return nil, fmt.Errorf("device %q: want %s, %s or %s", device, DeviceAuto, DeviceGPU, DeviceEmulated)
}

// ServeFolder serves the compiled step folder dir until ctx ends, then
// drains: it stops admitting (new requests get 503), lets the requests in
// flight finish within o.Drain, aborts the rest (and says how many) and
// returns nil. logf reports what it does.
func ServeFolder(ctx context.Context, dir string, o FolderOptions, logf func(format string, args ...any)) error {
	eng, err := openEngine(ctx, dir, o.Device, logf)
	if err != nil {
		return err
	}
	defer eng.Close()
	l := eng.Layout()
	tokPath := o.Tokenizer
	if st, err := os.Stat(tokPath); err == nil && st.IsDir() {
		tokPath = filepath.Join(tokPath, "tokenizer.json")
	}
	text, err := LoadText(TextOptions{Folder: eng.ModelFolder(), Tokenizer: tokPath, ChatTemplate: o.ChatTemplate}, l.Vocab)
	if err != nil {
		return fmt.Errorf("serve %s: %w", dir, err)
	}
	b, err := NewBatcher(eng, text, o.Batcher)
	if err != nil {
		return fmt.Errorf("serve %s: %w", dir, err)
	}
	defer b.Close()
	name := o.ServedModelName
	if name == "" {
		name = servedName(eng)
	}
	srv := &http.Server{Handler: NewServer(b, ServerOptions{Model: name}), ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", net.JoinHostPort(o.Host, fmt.Sprint(o.Port)))
	if err != nil {
		return fmt.Errorf("serve %s: %w", dir, err)
	}
	logf("serving %s as %q on http://%s (%s: %d tokens and %d sequences a step, %d KV blocks of %d positions, sequences up to %d positions)",
		dir, name, ln.Addr(), eng.Device(), l.MaxTokens, l.MaxSeqs, l.Blocks, l.BlockSize, b.MaxLen())
	if o.Ready != nil {
		o.Ready(ln.Addr().String())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", dir, err)
	case <-ctx.Done():
	}
	drain := o.Drain
	if drain <= 0 {
		drain = 30 * time.Second
	}
	logf("draining: no new requests, %d in flight get up to %s", b.Pending(), drain)
	dctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	if err := b.Shutdown(dctx); err != nil {
		// A deadline reached is how a drain ends, not a failure.
		logf("%v", err)
	}
	// The streams end once their requests have: Shutdown waits for the
	// handlers, which the batcher has answered by now.
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	serr := srv.Shutdown(sctx)
	if errors.Is(serr, context.DeadlineExceeded) {
		serr = srv.Close()
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		serr = errors.Join(serr, err)
	}
	logf("stopped")
	return serr
}

// servedName is the name a folder's model is served by: its Hugging Face
// folder's name, else the model plan.json names, without the kind.
func servedName(e folderEngine) string {
	if f := e.ModelFolder(); f != "" {
		return filepath.Base(f)
	}
	m := e.Model()
	if i := strings.LastIndex(m, ":"); i > 0 {
		m = m[:i]
	}
	return m
}
