package teaminbox

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/mewkit/fulfiller/elicit/approver"
	"github.com/mewkit/fulfiller/internal/httpserve"
)

// Join connects one approver to the fulfiller: in a space, joined and
// subscribed with approver.SubscribeOptions() from the join on
// (agent.DialSubscribed, approver.SpaceLink: the fulfiller re-sends open
// prompts the moment an approver appears); in fulfiller mcp's process,
// through its approver.Local.
type Join func(ctx context.Context, approverID string) (approver.Link, error)

// Rejoin delays: a join that failed, or a client that stopped, is tried
// again after joinRetry, doubling up to joinRetryMax.
const (
	joinRetry    = time.Second
	joinRetryMax = time.Minute
)

// Run is the inbox's side in the space: it joins as every enrolled
// approver, and as each approver who enrols while it runs, and runs an
// approver.Client for each with that approver's UI as its face (opts for
// all of them; no Key: each answer carries the approver's passkey
// assertion, made in their browser), until ctx ends. A join that fails is
// tried again with backoff, so an inbox started before the gateway
// catches up.
func (s *Server) Run(ctx context.Context, join Join, opts approver.Options) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu      sync.Mutex // guards started and wg.Add against the end of Run
		started = map[string]bool{}
		wg      sync.WaitGroup
	)
	start := func(id string) {
		mu.Lock()
		defer mu.Unlock()
		if started[id] || ctx.Err() != nil {
			return
		}
		if !s.allowed(id) {
			s.log.Warn("an enrolled approver is not in the approver directory: not joined", "approver", id)
			return
		}
		started[id] = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.member(ctx, id, join, opts)
		}()
	}
	s.mu.Lock()
	s.onEnrol = start
	s.mu.Unlock()
	for _, id := range s.Enrolled() {
		start(id)
	}
	<-ctx.Done()
	s.mu.Lock()
	s.onEnrol = nil
	s.mu.Unlock()
	mu.Lock() // a start under way finishes its wg.Add; later ones see ctx ended
	mu.Unlock()
	wg.Wait()
	return nil
}

// member keeps approver id connected to the fulfiller until ctx ends.
func (s *Server) member(ctx context.Context, id string, join Join, opts approver.Options) {
	log := s.log.With("approver", id)
	opts.Logger = log
	opts.Key = nil
	delay := joinRetry
	for {
		link, err := join(ctx, id)
		if err == nil {
			log.Info("connected to the fulfiller for an enrolled approver")
			err = approver.New(link.Conn, s.UI(id), opts).Run(ctx, link.In)
			link.Close()
			delay = joinRetry
		}
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = fmt.Errorf("the connection ended")
		}
		log.Warn("the approver is not connected to the fulfiller; connecting again", "in", delay, "err", err)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		delay = min(2*delay, joinRetryMax)
	}
}

// allowed reports whether id may enrol, sign in and be joined: any id
// without Options.Approvers, else only those.
func (s *Server) allowed(id string) bool {
	return len(s.opts.Approvers) == 0 || slices.Contains(s.opts.Approvers, id)
}

// Serve serves the inbox's page and API on ln until ctx ends: HTTPS with
// certFile and keyFile, else plain HTTP (for loopback, or behind a
// reverse proxy that terminates TLS).
func (s *Server) Serve(ctx context.Context, ln net.Listener, certFile, keyFile string) error {
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)}
	if err := httpserve.Serve(ctx, srv, ln, certFile, keyFile); err != nil {
		return fmt.Errorf("team inbox: %w", err)
	}
	return nil
}
