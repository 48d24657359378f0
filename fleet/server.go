package fleet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ServerOptions say how StartServer runs the embedded NATS server.
type ServerOptions struct {
	// ConfigFile is a nats-server configuration file (accounts, TLS,
	// limits, clustering: whatever NATS provides); the fields below
	// override what it says when they are set.
	ConfigFile string
	// Host is the address to listen on ("": 127.0.0.1, this machine
	// only; 0.0.0.0 for a fleet of other machines).
	Host string
	// Port is the client port (0: 4222, NATS's; -1: any free port).
	Port int
	// StoreDir is the folder JetStream keeps its streams in. Required
	// unless the configuration file names one.
	StoreDir string
	// MaxPayload is the largest message the server takes, in bytes (0:
	// the file's, else NATS's 1 MiB). A job larger than it is refused at
	// publish.
	MaxPayload int32
	// Fleet configures the streams and buckets Setup makes.
	Fleet Config
	// Connect is how StartServer's own connection authenticates, when
	// the configuration file asks clients to (ConnectOptionsFromEnv).
	Connect ConnectOptions
	// Log, when set, receives the server's warnings and errors (refused
	// connections, permission violations); its notices are left out.
	Log func(format string, args ...any)
}

// Server is the embedded NATS server with JetStream and the fleet set up
// on it.
type Server struct {
	ns *server.Server
}

// StartServer starts an embedded NATS server with JetStream storing in
// o.StoreDir and sets the fleet's streams and buckets up on it (Setup).
// ctx bounds the start only; Shutdown stops the server.
func StartServer(ctx context.Context, o ServerOptions) (*Server, error) {
	opts := &server.Options{}
	if o.ConfigFile != "" {
		var err error
		if opts, err = server.ProcessConfigFile(o.ConfigFile); err != nil {
			return nil, fmt.Errorf("nats-server configuration %s: %w", o.ConfigFile, err)
		}
	}
	switch {
	case o.Host != "":
		opts.Host = o.Host
	case opts.Host == "" || o.ConfigFile == "":
		opts.Host = "127.0.0.1"
	}
	if o.Port != 0 || opts.Port == 0 {
		opts.Port = o.Port
		if o.Port == 0 {
			opts.Port = server.DEFAULT_PORT
		}
	}
	if o.StoreDir != "" {
		opts.StoreDir = o.StoreDir
	}
	if opts.StoreDir == "" {
		return nil, errors.New("the embedded server needs a store folder (--store DIR)")
	}
	if err := os.MkdirAll(opts.StoreDir, 0o755); err != nil {
		return nil, fmt.Errorf("store folder: %w", err)
	}
	if o.MaxPayload > 0 {
		opts.MaxPayload = o.MaxPayload
	}
	opts.JetStream = true
	// The command handles signals; the server must not exit the process.
	opts.NoSigs = true
	opts.NoLog = o.Log == nil
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS server: %w", err)
	}
	if o.Log != nil {
		ns.SetLogger(logger(o.Log), false, false)
	}
	ns.Start()
	wait := 10 * time.Second
	if d, ok := ctx.Deadline(); ok {
		wait = time.Until(d)
	}
	if !ns.ReadyForConnections(wait) {
		ns.Shutdown()
		return nil, fmt.Errorf("embedded NATS server on %s:%d did not start within %v (is the port taken?)", opts.Host, opts.Port, wait.Round(time.Millisecond))
	}
	s := &Server{ns: ns}
	co := o.Connect
	co.Name = "lumsearch tuning-server"
	nc, err := Connect(s.URL(), co)
	if err != nil {
		s.Shutdown()
		return nil, fmt.Errorf("embedded NATS server: %w", err)
	}
	defer nc.Close()
	if err := Setup(ctx, nc, o.Fleet); err != nil {
		s.Shutdown()
		return nil, fmt.Errorf("set the fleet up: %w", err)
	}
	return s, nil
}

// URL is the server's client URL, nats://HOST:PORT.
func (s *Server) URL() string { return s.ns.ClientURL() }

// StoreDir is the folder JetStream keeps the streams in.
func (s *Server) StoreDir() string { return s.ns.JetStreamConfig().StoreDir }

// Port is the port the server listens on (the one it found with Port -1).
func (s *Server) Port() int {
	if a, ok := s.ns.Addr().(*net.TCPAddr); ok {
		return a.Port
	}
	return 0
}

// Shutdown stops the server and waits until it has; the store keeps
// everything JetStream acknowledged.
func (s *Server) Shutdown() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}

// logger passes the server's notices, warnings and errors to a function.
type logger func(format string, args ...any)

func (l logger) Noticef(string, ...any)         {}
func (l logger) Warnf(format string, v ...any)  { l("warning: "+format, v...) }
func (l logger) Fatalf(format string, v ...any) { l("fatal: "+format, v...) }
func (l logger) Errorf(format string, v ...any) { l("error: "+format, v...) }
func (l logger) Debugf(string, ...any)          {}
func (l logger) Tracef(string, ...any)          {}
