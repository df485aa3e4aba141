package state

import (
	"context"
	"errors"
	"fmt"
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
	defer s.timed("pin", time.Now(), &err)
	pinned = make(map[string]string, len(digests))
	created := false
	for name, d := range digests {
		k := pinKey(server, name)
		_, err := s.pins.Create(ctx, k, []byte(d))
		switch {
		case err == nil:
			pinned[name], created = d, true
		case isWrongLastSeq(err):
			d, err := s.pinOf(ctx, k)
			if err != nil {
				return nil, fmt.Errorf("state: read the pin of tool %q of %q: %w", truncate(name), truncate(server), err)
			}
			pinned[name] = d
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
