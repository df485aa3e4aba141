package state

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Pins keep the tool definitions first seen of each MCP upstream (their
// digests), for fulfiller mcp: a definition that changes later (a "rug
// pull": a description or schema changed under the user) is told to the
// policy as input.tool.changed until someone accepts it. They live in the
// store so that every fulfiller mcp on one --state (a client starts one
// per session) and every member of a cluster sees the same pins.
//
// Pin implements agent/mcpfront's Pins: for each tool of digests (name
// → digest) that server has none pinned for, the digest given is pinned
// (create-if-absent: of two instances pinning at once, one wins and both
// return its digest); it returns the digests pinned for every tool of
// digests, the old ones where they differ. Only Accept replaces a pin.
func (s *Store) Pin(ctx context.Context, server string, digests map[string]string) (pinned map[string]string, err error) {
	c, err := s.pinCache(ctx)
	if err != nil {
		return nil, err
	}
	pinned = make(map[string]string, len(digests))
	var missing []string
	for name, d := range digests {
		if p, ok := c.get(pinKey(server, name)); ok {
			pinned[name] = p
		} else {
			pinned[name] = d
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return pinned, nil // the call's usual way: no store round trip
	}
	defer s.timed("pin", time.Now(), &err)
	created := false
	for _, name := range missing {
		k := pinKey(server, name)
		_, err := s.pins.Create(ctx, k, []byte(pinned[name]))
		switch {
		case err == nil:
			created = true
			c.set(k, pinned[name])
		case isWrongLastSeq(err):
			d, err := s.pinOf(ctx, k)
			if err != nil {
				return nil, fmt.Errorf("state: read the pin of tool %q of %q: %w", truncate(name), truncate(server), err)
			}
			pinned[name] = d
			c.set(k, d)
		default:
			return nil, fmt.Errorf("state: pin tool %q of %q: %w", truncate(name), truncate(server), err)
		}
	}
	if created {
		// A pin is what later definitions are judged by: it must not be
		// lost to a crash and made again from a changed definition.
		if err := s.synced(ctx); err != nil {
			return nil, err
		}
	}
	return pinned, nil
}

// pins is the store's copy of the pins bucket in memory, kept by a watch:
// fulfiller mcp asks for a tool's pin on every call, which must cost no
// round trip; another process's Accept reaches it through the watch.
type pins struct {
	ready chan struct{} // closed once the bucket's values are in
	err   error         // why the watch could not start (set before ready)
	mu    sync.Mutex
	m     map[string]string // key → digest
}

func (c *pins) get(k string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.m[k]
	return d, ok
}

func (c *pins) set(k, d string) {
	c.mu.Lock()
	c.m[k] = d
	c.mu.Unlock()
}

// pinCache starts the pins' watch on first use (fulfiller run never
// pins) and waits until the bucket's values are in.
func (s *Store) pinCache(ctx context.Context) (*pins, error) {
	s.pinOnce.Do(func() {
		c := &pins{ready: make(chan struct{}), m: map[string]string{}}
		s.pinsMem.Store(c)
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed {
			c.err = ErrClosed
			close(c.ready)
			return
		}
		wctx, cancel := context.WithCancel(context.Background())
		w, err := s.pins.WatchAll(wctx)
		if err != nil {
			cancel()
			c.err = fmt.Errorf("state: watch pins: %w", err)
			close(c.ready)
			return
		}
		s.watchers.Add(1)
		go func() {
			defer s.watchers.Done()
			defer cancel()
			defer w.Stop()
			initial := true
			for {
				select {
				case <-s.stop:
					if initial {
						c.err = ErrClosed
						close(c.ready)
					}
					return
				case e, ok := <-w.Updates():
					if !ok {
						if initial {
							c.err = errors.New("state: the pins' watch ended")
							close(c.ready)
						}
						return
					}
					if e == nil { // the bucket's values are all in
						initial = false
						close(c.ready)
						continue
					}
					if e.Operation() == jetstream.KeyValuePut {
						c.set(e.Key(), string(e.Value()))
					}
				}
			}
		}()
	})
	c := s.pinsMem.Load()
	select {
	case <-c.ready:
		return c, c.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// pinOf reads the pin another process just made. In a cluster a read
// may reach a replica that has not applied that write yet (the bucket
// allows direct gets): not found there is tried again, a few times.
func (s *Store) pinOf(ctx context.Context, k string) (string, error) {
	for try := 1; ; try++ {
		e, err := s.pins.Get(ctx, k)
		if err == nil {
			return string(e.Value()), nil
		}
		if !errors.Is(err, jetstream.ErrKeyNotFound) || try == 10 {
			return "", err
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(time.Duration(try) * 10 * time.Millisecond):
		}
	}
}

// Accept records digests as server's tool definitions, replacing what
// was pinned (fulfiller mcp accept-tools NAME, the operator API).
func (s *Store) Accept(ctx context.Context, server string, digests map[string]string) (err error) {
	defer s.timed("pin", time.Now(), &err)
	for name, d := range digests {
		if _, err := s.pins.Put(ctx, pinKey(server, name), []byte(d)); err != nil {
			return fmt.Errorf("state: accept tool %q of %q: %w", truncate(name), truncate(server), err)
		}
		if c := s.pinsMem.Load(); c != nil && chanClosed(c.ready) && c.err == nil {
			c.set(pinKey(server, name), d) // this process's next call sees it at once
		}
	}
	return s.synced(ctx)
}

// Pinned returns the digests pinned for server's tools, by tool name (for
// accept-tools, to show what it replaces).
func (s *Store) Pinned(ctx context.Context, server string) (map[string]string, error) {
	prefix := key(server) + "."
	keys, err := s.pins.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("state: list pins: %w", err)
	}
	out := map[string]string{}
	for k := range keys.Keys() {
		if len(k) <= len(prefix) || k[:len(prefix)] != prefix {
			continue
		}
		name, ok := idOf(k[len(prefix):])
		if !ok {
			continue // a name too long to keep reversibly: hashed
		}
		e, err := s.pins.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("state: read pin %q: %w", truncate(name), err)
		}
		out[name] = string(e.Value())
	}
	return out, nil
}

// pinKey is the key of server's tool name: two tokens, each key().
func pinKey(server, name string) string { return key(server) + "." + key(name) }

// chanClosed reports whether ch is closed, without waiting.
func chanClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
