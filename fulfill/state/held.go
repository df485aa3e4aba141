package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// HeldCall is where a client's call held for approval waits, so that the
// client's retry of the same call re-attaches to it on whichever
// instance the retry reaches (fulfiller mcp serve on a NATS cluster:
// docs/mcp.md "Several instances"). The record of the proposal itself is
// in the pending bucket; this is only the way to it from the call.
type HeldCall struct {
	// ProposalID is the held proposal's; Member the instance that held
	// it when it was written (it may have died since).
	ProposalID string `json:"proposal_id"`
	Member     string `json:"member"`
	// Deadline is the approval's: a retry after it is a new call.
	Deadline time.Time `json:"deadline"`
}

// HeldCalls is the index of calls held for approval, keyed by the call
// as its client made it (the client, the upstream, the tool and its
// arguments: the caller's key). Open it with Store.HeldCalls.
type HeldCalls struct {
	s  *Store
	kv jetstream.KeyValue
}

// heldMaxAge is how long an entry stays at most: past its deadline it is
// ignored already; the age only bounds what a crashed instance leaves.
const heldMaxAge = 7 * 24 * time.Hour

// HeldCalls opens (creating it when needed) the store's index of calls
// held for approval. Only a shared store has one: alone on its store, a
// process's held calls are its own.
func (s *Store) HeldCalls(ctx context.Context) (*HeldCalls, error) {
	if s.cfg.Mode.Kind != External {
		return nil, fmt.Errorf("state: held calls are indexed only on a NATS cluster, not %s", s.cfg.Mode)
	}
	c := jetstream.KeyValueConfig{Bucket: bucketName("held", s.cfg.Space), Description: "fulfiller mcp calls held for approval, space " + s.cfg.Space,
		Storage: jetstream.FileStorage, History: 1, TTL: heldMaxAge}
	kv, err := s.bucket(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("state: open the held calls' bucket: %w", err)
	}
	return &HeldCalls{s: s, kv: kv}, nil
}

// Put records that the call of key is held as c until c.Deadline.
func (h *HeldCalls) Put(ctx context.Context, key string, c HeldCall) (err error) {
	defer h.s.timed("held_put", time.Now(), &err)
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("state: held call: %w", err)
	}
	if _, err := h.kv.Put(ctx, heldKey(key), b); err != nil {
		return fmt.Errorf("state: record held call %s: %w", truncate(c.ProposalID), err)
	}
	return nil
}

// Get returns the call held under key; ok false when none is, or its
// deadline has passed (as of now).
func (h *HeldCalls) Get(ctx context.Context, key string, now time.Time) (c HeldCall, ok bool, err error) {
	defer h.s.timed("held_get", time.Now(), &err)
	e, err := h.kv.Get(ctx, heldKey(key))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return HeldCall{}, false, nil
	}
	if err != nil {
		return HeldCall{}, false, fmt.Errorf("state: read held call: %w", err)
	}
	if err := json.Unmarshal(e.Value(), &c); err != nil || c.ProposalID == "" {
		return HeldCall{}, false, fmt.Errorf("state: held call entry unreadable: %q", truncate(string(e.Value())))
	}
	if !now.Before(c.Deadline) {
		return HeldCall{}, false, nil
	}
	return c, true, nil
}

// heldKey is key as a KV key: callers pass a digest, but any bytes are
// kept to the KV alphabet (key).
func heldKey(k string) string { return key(k) }

// Expire deletes the entries whose deadline has passed (as of now): a
// retry no longer finds them (Get), and without this they stayed until
// the bucket's age limit. Each goes by compare-and-set on the revision
// read, so an entry a new call wrote under the same key meanwhile stays.
// It returns how many it deleted.
func (h *HeldCalls) Expire(ctx context.Context, now time.Time) (n int, err error) {
	defer h.s.timed("held_expire", time.Now(), &err)
	entries, err := h.s.snapshot(ctx, h.kv)
	if err != nil {
		return 0, fmt.Errorf("state: list held calls: %w", err)
	}
	for _, e := range entries {
		var c HeldCall
		if json.Unmarshal(e.Value(), &c) == nil && now.Before(c.Deadline) {
			continue // an unreadable entry goes too: Get refuses it
		}
		switch err := h.kv.Delete(ctx, e.Key(), jetstream.LastRevision(e.Revision())); {
		case err == nil:
			n++
		case isWrongLastSeq(err):
			// Written again since (a new call), or deleted by another
			// instance's sweep.
		default:
			return n, fmt.Errorf("state: delete held call %s: %w", e.Key(), err)
		}
	}
	return n, nil
}
