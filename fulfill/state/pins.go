package state

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
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
		s.noteListed(ctx, c, server, digests, pinned)
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
	s.noteListed(ctx, c, server, digests, pinned)
	return pinned, nil
}

// noteListed records, for each tool of digests whose definition differs
// from its pin (or differed, and the record says so), the digest listed
// now, so that `fulfiller mcp accept-tools` — another process, which
// never sees the upstream — knows what to accept (Changes). It writes
// only when the record changes (the watch keeps what is recorded in
// memory), never on a call of a tool that is as pinned. A failed write
// is logged, not returned: the pin, which decides, is already read, and
// the next listing writes again.
func (s *Store) noteListed(ctx context.Context, c *pins, server string, digests, pinned map[string]string) {
	for name, d := range digests {
		k := listedKey(server, name)
		was, noted := c.get(k)
		if (d == pinned[name] && !noted) || (noted && was == d) {
			continue
		}
		if _, err := s.pins.Put(ctx, k, []byte(d)); err != nil {
			s.log.Warn("the listed definition of a changed tool is not recorded: accept-tools cannot accept it until it is listed again",
				"upstream", truncate(server), "tool", truncate(name), "err", err)
			continue
		}
		c.set(k, d)
	}
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

// ToolChange is a tool whose definition, as an upstream last listed it,
// differs from the one pinned: digests as Pin takes them.
type ToolChange struct {
	Pinned, Listed string
}

// Changes returns server's tools, by name, whose definition as last
// listed by any fulfiller mcp on this store differs from the pinned one:
// what `fulfiller mcp accept-tools NAME` accepts (Accept of the Listed
// digests). A tool whose name is too long to keep reversibly is left out.
func (s *Store) Changes(ctx context.Context, server string) (map[string]ToolChange, error) {
	pinned, err := s.Pinned(ctx, server)
	if err != nil {
		return nil, err
	}
	prefix := listedPrefix + key(server) + "."
	keys, err := s.pins.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("state: list pins: %w", err)
	}
	out := map[string]ToolChange{}
	for k := range keys.Keys() {
		rest, ok := strings.CutPrefix(k, prefix)
		if !ok {
			continue
		}
		name, ok := idOf(rest)
		if !ok {
			continue
		}
		e, err := s.pins.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("state: read the listed definition of %q: %w", truncate(name), err)
		}
		if p, ok := pinned[name]; ok && p != string(e.Value()) {
			out[name] = ToolChange{Pinned: p, Listed: string(e.Value())}
		}
	}
	return out, nil
}

// PinnedServers returns the names of the upstreams that have tools
// pinned, sorted (for accept-tools to say which names it knows).
func (s *Store) PinnedServers(ctx context.Context) ([]string, error) {
	keys, err := s.pins.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("state: list pins: %w", err)
	}
	seen := map[string]bool{}
	for k := range keys.Keys() {
		first, _, ok := strings.Cut(k, ".")
		if !ok || k[:len(first)+1] == listedPrefix {
			continue
		}
		if name, ok := idOf(first); ok {
			seen[name] = true
		}
	}
	return slices.Sorted(maps.Keys(seen)), nil
}

// pinKey is the key of server's tool name: two tokens, each key().
func pinKey(server, name string) string { return key(server) + "." + key(name) }

// listedPrefix starts the keys of the definitions last listed where they
// differ from the pin (noteListed). key() never makes a token "now", so
// these keys are never taken for a pin's.
const listedPrefix = "now."

// listedKey is the key of server's tool name's definition as last listed.
func listedKey(server, name string) string { return listedPrefix + pinKey(server, name) }

// chanClosed reports whether ch is closed, without waiting.
func chanClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
