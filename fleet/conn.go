package fleet

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Environment variables that ConnectOptionsFromEnv reads: how every
// command authenticates to a secured NATS server, as NATS provides it.
const (
	EnvUser     = "LUMSEARCH_NATS_USER"     // a user name, with EnvPassword
	EnvPassword = "LUMSEARCH_NATS_PASSWORD" // its password
	EnvCreds    = "LUMSEARCH_NATS_CREDS"    // a NATS credentials file (JWT and seed)
	EnvCA       = "LUMSEARCH_NATS_CA"       // the CA certificates that sign the server's
	EnvCert     = "LUMSEARCH_NATS_CERT"     // this client's certificate, for mutual TLS
	EnvKey      = "LUMSEARCH_NATS_KEY"      // its private key
)

// ConnectOptions say how to reach a NATS server beyond its URL (which may
// carry a user and password, nats://user:pass@host:4222, or ask for TLS,
// tls://host:4222).
type ConnectOptions struct {
	// Name is the connection's name, shown by the server's monitoring.
	Name string
	// User and Password authenticate by name and password (a URL's own
	// user:password@ does too).
	User, Password string
	// CredsFile is a NATS credentials file; CAFile, CertFile and KeyFile
	// configure TLS (CertFile and KeyFile together, for mutual TLS).
	CredsFile, CAFile, CertFile, KeyFile string
	// Timeout bounds the first connection (0: 5 s).
	Timeout time.Duration
	// ReconnectWait is the pause between reconnection attempts (0: 250
	// ms); the connection keeps trying for as long as it is open, and the
	// callers bound how long they wait for it.
	ReconnectWait time.Duration
	// Wait makes the first connection keep trying in the background when
	// the server is not up yet (a worker started before its server).
	Wait bool
}

// ConnectOptionsFromEnv are the options the environment variables EnvUser,
// EnvPassword, EnvCreds, EnvCA, EnvCert and EnvKey give.
func ConnectOptionsFromEnv() ConnectOptions {
	return ConnectOptions{User: os.Getenv(EnvUser), Password: os.Getenv(EnvPassword), CredsFile: os.Getenv(EnvCreds),
		CAFile: os.Getenv(EnvCA), CertFile: os.Getenv(EnvCert), KeyFile: os.Getenv(EnvKey)}
}

// CheckURL says whether u looks like a NATS server's address (or a
// comma-separated list of them): nats://, tls://, ws:// or wss://.
func CheckURL(u string) error {
	if strings.TrimSpace(u) == "" {
		return errors.New("no NATS URL")
	}
	for _, one := range strings.Split(u, ",") {
		p, err := url.Parse(strings.TrimSpace(one))
		if err != nil {
			return fmt.Errorf("NATS URL %q: %w", one, err)
		}
		switch p.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return fmt.Errorf("NATS URL %q: want nats://HOST:PORT (or tls://, ws://, wss://)", one)
		}
		if p.Host == "" {
			return fmt.Errorf("NATS URL %q: no host", one)
		}
	}
	return nil
}

// Connect connects to the NATS server at u. The connection reconnects by
// itself for as long as it is open; its users bound their waits.
func Connect(u string, o ConnectOptions) (*nats.Conn, error) {
	if err := CheckURL(u); err != nil {
		return nil, err
	}
	wait := o.ReconnectWait
	if wait <= 0 {
		wait = 250 * time.Millisecond
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	opts := []nats.Option{nats.Name(o.Name), nats.MaxReconnects(-1), nats.ReconnectWait(wait), nats.Timeout(timeout),
		// Reconnection is attempted soon after a server restart, with
		// no more jitter than the wait itself.
		nats.ReconnectJitter(wait/4, wait/4),
		// Asynchronous errors (a watcher's consumer lost with a
		// restarting server, which the client recreates) are the
		// client's to handle; the default handler would print them.
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})}
	if o.Wait {
		opts = append(opts, nats.RetryOnFailedConnect(true))
	}
	if o.User != "" {
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	}
	if o.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	}
	if o.CAFile != "" {
		opts = append(opts, nats.RootCAs(o.CAFile))
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return nil, errors.New("a TLS client certificate needs both its certificate and its key file")
	}
	if o.CertFile != "" {
		opts = append(opts, nats.ClientCert(o.CertFile, o.KeyFile))
	}
	nc, err := nats.Connect(u, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", Redact(u), err)
	}
	return nc, nil
}

// Redact hides the passwords of a NATS URL (or list of them), for messages.
func Redact(u string) string {
	var out []string
	for _, one := range strings.Split(u, ",") {
		if p, err := url.Parse(strings.TrimSpace(one)); err == nil {
			out = append(out, p.Redacted())
		} else {
			out = append(out, "(a NATS URL)")
		}
	}
	return strings.Join(out, ",")
}

// handles are the JetStream objects a fleet party uses.
type handles struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	jobs    jetstream.Stream
	results jetstream.KeyValue
	state   jetstream.KeyValue
}

// open finds the fleet's stream and buckets on nc's server; they must
// exist (Setup makes them: lumsearch tuning-server).
func open(ctx context.Context, nc *nats.Conn) (*handles, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	h := &handles{nc: nc, js: js}
	missing := func(what string, err error) error {
		return fmt.Errorf("%s on the NATS server at %s: %w (start lumsearch tuning-server, or run it once with --nats URL against a cluster, to set the fleet up)", what, nc.ConnectedUrlRedacted(), err)
	}
	if h.jobs, err = js.Stream(ctx, JobStream); err != nil {
		return nil, missing("stream "+JobStream, err)
	}
	if h.results, err = js.KeyValue(ctx, ResultBucket); err != nil {
		return nil, missing("bucket "+ResultBucket, err)
	}
	if h.state, err = js.KeyValue(ctx, FleetBucket); err != nil {
		return nil, missing("bucket "+FleetBucket, err)
	}
	return h, nil
}

// putTTL puts value under key in the fleet bucket with a time to live,
// after which the server removes it by itself (a per-message TTL, which
// the bucket allows; at least a second).
func (h *handles) putTTL(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	_, err := h.js.Publish(ctx, fleetSubject(key), value, jetstream.WithMsgTTL(max(ttl, time.Second).Round(time.Second)))
	return err
}

// short bounds one request to the server, so that no call waits for a
// server that is gone longer than d.
func short(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

// refused is the server's last refusal of a subject to this connection's
// user (a request to a subject it may not use waits for an answer that
// never comes; the refusal says why), or nil.
func refused(nc *nats.Conn) error {
	if err := nc.LastError(); errors.Is(err, nats.ErrPermissionViolation) {
		return fmt.Errorf("%w (the NATS server does not let this user use it; docs/distributed.md lists what each party needs)", err)
	}
	return nil
}
