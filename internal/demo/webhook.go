package demo

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/mewkit/fulfiller/notify"
)

// webhookReceiver is the demo's stand-in for an operator's webhook
// endpoint (run --notify https://…): a real HTTP server on loopback that
// checks each delivery's signature as docs/operations.md tells a receiver
// to, and hands what it received to the narrator. A delivery whose
// signature does not verify is refused (401) and still shown, as refused.
type webhookReceiver struct {
	secret []byte
	srv    *http.Server
	url    string
	heard  func(ev notify.Event, verified bool)
	served chan struct{}
}

func startWebhookReceiver(heard func(notify.Event, bool)) (*webhookReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo: webhook receiver: %w", err)
	}
	w := &webhookReceiver{secret: []byte(rand.Text()), heard: heard, url: "http://" + ln.Addr().String() + "/fulfiller-events", served: make(chan struct{})}
	w.srv = &http.Server{Handler: w, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		defer close(w.served)
		// Serve ends with ErrServerClosed at close; a failure before
		// that fails the deliveries, which the narration then lacks.
		_ = w.srv.Serve(ln)
	}()
	return w, nil
}

// target is the notifier's target for this receiver, as --notify URL
// with --notify-secret-file makes it.
func (w *webhookReceiver) target() (notify.Target, error) {
	return notify.ParseTarget(w.url, notify.Options{Secret: w.secret})
}

// ServeHTTP implements http.Handler.
func (w *webhookReceiver) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil || r.Method != http.MethodPost {
		http.Error(rw, "want a POST with a body", http.StatusBadRequest)
		return
	}
	// Compare in constant time, over the exact bytes received.
	verified := hmac.Equal([]byte(r.Header.Get(notify.SignatureHeader)), []byte(notify.Sign(w.secret, body)))
	var ev notify.Event
	if err := json.Unmarshal(body, &ev); err != nil {
		http.Error(rw, "not an event", http.StatusBadRequest)
		return
	}
	w.heard(ev, verified)
	if !verified {
		http.Error(rw, "signature does not verify", http.StatusUnauthorized)
		return
	}
	rw.WriteHeader(http.StatusNoContent)
}

// close stops the server once the notifier is done with it.
func (w *webhookReceiver) close(ctx context.Context) {
	_ = w.srv.Shutdown(ctx)
	<-w.served
}
