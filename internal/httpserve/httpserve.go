// Package httpserve runs an http.Server for as long as a context lives:
// the approver inboxes' shared serve loop (fulfiller approve --web and
// fulfiller inbox serve).
package httpserve

import (
	"context"
	"net"
	"net/http"
	"time"
)

// shutdownGrace bounds how long requests in progress may finish once the
// context ends; event streams never finish by themselves, so it is short.
const shutdownGrace = 2 * time.Second

// Serve serves srv on ln until ctx ends, over TLS when certFile and
// keyFile are given, and then shuts it down gracefully (shutdownGrace at
// most) and returns nil. If serving fails first, it returns that error
// (http.ErrServerClosed never: nothing else closes srv).
func Serve(ctx context.Context, srv *http.Server, ln net.Listener, certFile, keyFile string) error {
	errc := make(chan error, 1)
	go func() {
		if certFile != "" {
			errc <- srv.ServeTLS(ln, certFile, keyFile)
			return
		}
		errc <- srv.Serve(ln)
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-errc
		return nil
	}
}
