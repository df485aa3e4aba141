package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"

	"github.com/spf13/pflag"

	"github.com/mewkit/fulfiller/elicit/inbox"
)

// webFlags are the approval inbox's flags, shared by approve and demo.
type webFlags struct {
	addr, cert, key string
}

// defaultWebAddr is what a bare --web of demo serves on.
const defaultWebAddr = "127.0.0.1:8765"

// register adds the flags. With bare, a bare --web serves on
// defaultWebAddr, and an address must then be given as --web=ADDR (demo);
// without it --web takes ADDR as its value, as docs/design.md writes it (approve).
func (wf *webFlags) register(f *pflag.FlagSet, usage string, bare bool) {
	f.StringVar(&wf.addr, "web", "", usage)
	if bare {
		f.Lookup("web").NoOptDefVal = defaultWebAddr
	}
	f.StringVar(&wf.cert, "web-tls-cert", "", "serve the inbox over HTTPS with this certificate `FILE` (PEM; needed beyond loopback)")
	f.StringVar(&wf.key, "web-tls-key", "", "the private key `FILE` of --web-tls-cert (PEM)")
}

// validate checks the flags: an address, loopback unless TLS is given
// (the page carries a secret and answers approvals), and both TLS files
// or neither, readable as a pair.
func (wf *webFlags) validate() error {
	if wf.addr == "" {
		if wf.cert != "" || wf.key != "" {
			return usageErrorf("--web-tls-cert and --web-tls-key are for --web")
		}
		return nil
	}
	host, _, err := net.SplitHostPort(wf.addr)
	if err != nil {
		return usageErrorf("--web %q: want host:port, e.g. %s", wf.addr, defaultWebAddr)
	}
	if (wf.cert == "") != (wf.key == "") {
		return usageErrorf("--web-tls-cert and --web-tls-key go together")
	}
	if wf.cert != "" {
		if _, err := tls.LoadX509KeyPair(wf.cert, wf.key); err != nil {
			return usageErrorf("--web-tls-cert %s, --web-tls-key %s: %v", wf.cert, wf.key, err)
		}
		return nil
	}
	if !loopback(host) {
		return usageErrorf("--web %s: the inbox serves plain HTTP only on loopback (127.0.0.1, ::1, localhost); give --web-tls-cert and --web-tls-key to serve it on %s", wf.addr, host)
	}
	return nil
}

// loopback reports whether host names only this machine.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// serveInbox listens on --web and serves in until ctx ends. It returns
// the page's URL, with the secret, and a channel that yields the server's
// end (nil after ctx ended).
func (wf *webFlags) serveInbox(ctx context.Context, in *inbox.Inbox) (string, <-chan error, error) {
	ln, err := net.Listen("tcp", wf.addr)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) {
			return "", nil, usageErrorf("--web %s: %v", wf.addr, op.Err)
		}
		return "", nil, usageErrorf("--web %s: %v", wf.addr, err)
	}
	scheme := "http"
	if wf.cert != "" {
		scheme = "https"
	}
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	if h, _, _ := net.SplitHostPort(wf.addr); h == "localhost" {
		host = h // as the person typed it: the cookie is per host name
	}
	url := fmt.Sprintf("%s://%s/?token=%s", scheme, net.JoinHostPort(host, port), in.Secret())
	done := make(chan error, 1)
	go func() { done <- in.Serve(ctx, ln, wf.cert, wf.key) }()
	return url, done, nil
}

// webCards is how many prompts the inbox shows side by side
// (approver.Options.Open); more wait their turn in arrival order.
const webCards = 64

// serveWeb serves in on --web while the returned context lives. The
// context ends with ctx, or when the server fails; stop ends the server,
// waits for it, and returns its failure, if any.
func serveWeb(ctx context.Context, wf *webFlags, in *inbox.Inbox) (_ context.Context, url string, stop func() error, _ error) {
	sctx, cancel := context.WithCancelCause(ctx)
	url, done, err := wf.serveInbox(sctx, in)
	if err != nil {
		cancel(err)
		return nil, "", nil, err
	}
	var failed error
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		if err := <-done; err != nil {
			failed = err
			cancel(err)
		}
	}()
	stop = func() error {
		cancel(context.Canceled)
		<-ended
		return failed
	}
	return sctx, url, stop, nil
}
