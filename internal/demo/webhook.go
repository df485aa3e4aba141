package demo

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/mewkit/fulfiller/elicit/notify"
)

// receiver is the demo's webhook receiver: what an operator puts behind
// run --notify https://…, on loopback. It checks every request's
// X-Fulfiller-Signature as docs/operations.md ("Notifications") tells a
// receiver to, with its own random secret, and keeps what it verified
// per proposal for the narration; a request that does not verify is
// refused (401) and counted.
type receiver struct {
	secret []byte
	srv    *http.Server
	url    string
	done   chan struct{}

	mu     sync.Mutex
	events map[string][]notify.Event
	bad    int
	change chan struct{} // closed and replaced on every request
}

// startReceiver listens on a loopback port; close stops it.
func startReceiver() (*receiver, error) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, fmt.Errorf("webhook secret: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("webhook receiver: %w", err)
	}
	r := &receiver{secret: secret, url: "http://" + ln.Addr().String() + "/fulfiller-events", done: make(chan struct{}),
		events: map[string][]notify.Event{}, change: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /fulfiller-events", r.serve)
	r.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { defer close(r.done); _ = r.srv.Serve(ln) }()
	return r, nil
}

// close stops the server and waits for it.
func (r *receiver) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = r.srv.Shutdown(ctx)
	<-r.done
}

// serve verifies, then keeps, one event.
func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		http.Error(w, "read failed", http.StatusBadRequest)
		return
	}
	mac := hmac.New(sha256.New, r.secret)
	mac.Write(body)
	want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
	var ev notify.Event
	verified := hmac.Equal([]byte(req.Header.Get(notify.SignatureHeader)), []byte(want))
	if verified {
		verified = json.Unmarshal(body, &ev) == nil && ev.Proposal != ""
	}
	r.mu.Lock()
	if verified {
		r.events[ev.Proposal] = append(r.events[ev.Proposal], ev)
	} else {
		r.bad++
	}
	close(r.change)
	r.change = make(chan struct{})
	r.mu.Unlock()
	if !verified {
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// refused is how many requests did not verify.
func (r *receiver) refused() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bad
}

// waitEnded waits until the prompt.ended of proposal id came (or ctx
// ends, or a request was refused) and returns what came for it, forgetting it.
func (r *receiver) waitEnded(ctx context.Context, id string) []notify.Event {
	for {
		r.mu.Lock()
		evs, ch := r.events[id], r.change
		ended := len(evs) > 0 && evs[len(evs)-1].Type == notify.PromptEnded
		// A refused request may have been this proposal's: do not wait
		// out the step for it; Run fails on it.
		if ended || r.bad > 0 || ctx.Err() != nil {
			delete(r.events, id)
			r.mu.Unlock()
			return evs
		}
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
	}
}

// describeWebhook is one received event as the narration shows it: its
// type, who it names and how it ended — never the arguments.
func describeWebhook(ev notify.Event) string {
	var text string
	switch ev.Type {
	case notify.PromptOpened:
		text = "for " + strings.Join(ev.Approvers, ", ")
	case notify.PromptReminder:
		text = "still waiting for " + strings.Join(ev.Approvers, ", ")
	case notify.PromptEscalated:
		text = "now asking " + strings.Join(ev.Approvers, ", ")
	case notify.PromptEnded:
		text = ev.Outcome // the reason is in the journey above
	}
	return "→ webhook: " + string(ev.Type) + " " + text + " (signature verified)"
}

// errUnverified is the demo's failure when the receiver refused a request.
var errUnverified = errors.New("the webhook receiver refused requests whose signature did not verify")
