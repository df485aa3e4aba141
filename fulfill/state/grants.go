package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Grant is a stored grant (docs/design.md "Grants"): the grants package's document,
// opaque to the store, with the id and expiry the store needs. Grants live
// in the store so that they survive restarts and a group shares them.
type Grant struct {
	ID      string          `json:"id"`
	Expires time.Time       `json:"expires"`
	Revoked bool            `json:"revoked,omitempty"`
	Doc     json.RawMessage `json:"doc"`

	StoreRevision uint64 `json:"-"`
}

// grantKeep is how long a grant's record outlives its expiry: long enough
// that `fulfiller grants list` and the audit show what recently expired or
// was revoked, short enough that grants do not pile up. The record's
// per-key TTL removes it then; nothing sweeps.
const grantKeep = 24 * time.Hour

// PutGrant stores a new grant (create-if-absent: ErrExists when its id is
// taken) and sets g.StoreRevision. It is synced: a grant is acted on by
// every member as soon as it is read.
func (s *Store) PutGrant(ctx context.Context, g *Grant) (err error) {
	defer s.timed("grant", time.Now(), &err)
	rev, err := s.writeGrant(ctx, g, 0)
	if err != nil {
		return err
	}
	g.StoreRevision = rev
	return s.synced(ctx)
}

// RevokeGrant marks the grant revoked, keeping its record (for the list
// and the audit) until grantKeep after its expiry. Revoking a revoked
// grant is not an error; ErrNotFound when there is no such grant.
func (s *Store) RevokeGrant(ctx context.Context, id string) (g *Grant, err error) {
	defer s.timed("grant", time.Now(), &err)
	for range 8 { // a concurrent revoke or expiry races us: read again
		e, err := s.grants.Get(ctx, key(id))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, ErrNotFound
		} else if err != nil {
			return nil, fmt.Errorf("state: get grant %q: %w", truncate(id), err)
		}
		if g, err = decodeGrant(e); err != nil {
			return nil, err
		}
		if g.Revoked {
			return g, nil
		}
		g.Revoked = true
		rev, err := s.writeGrant(ctx, g, e.Revision())
		if errors.Is(err, ErrConflict) {
			continue
		} else if err != nil {
			return nil, err
		}
		g.StoreRevision = rev
		return g, s.synced(ctx)
	}
	return nil, fmt.Errorf("state: revoke grant %q: %w", truncate(id), ErrConflict)
}

// Grants returns every stored grant, live or not (the caller decides
// which still match: expiry is checked against its clock, not the store's
// TTL, which only forgets them).
func (s *Store) Grants(ctx context.Context) (gs []*Grant, err error) {
	defer s.timed("grant", time.Now(), &err)
	entries, err := s.snapshot(ctx, s.grants)
	if err != nil {
		return nil, fmt.Errorf("state: list grants: %w", err)
	}
	for _, e := range entries {
		g, err := decodeGrant(e)
		if err != nil {
			s.log.Warn("unreadable grant record skipped", "key", e.Key(), "err", err)
			continue
		}
		gs = append(gs, g)
	}
	return gs, nil
}

// writeGrant writes g with a TTL of grantKeep past its expiry: create when
// last is 0, else only over revision last. The KV API sets a TTL only on
// Create, so an update is a publish to the key's subject, as for leases.
func (s *Store) writeGrant(ctx context.Context, g *Grant, last uint64) (uint64, error) {
	if !utf8.ValidString(g.ID) || g.ID == "" {
		return 0, fmt.Errorf("state: grant id %q is empty or not valid UTF-8", truncate(g.ID))
	}
	ttl := time.Until(g.Expires) + grantKeep
	if ttl < time.Second {
		return 0, fmt.Errorf("state: grant %q expired more than %v ago", truncate(g.ID), grantKeep)
	}
	val, err := json.Marshal(g)
	if err != nil {
		return 0, fmt.Errorf("state: encode grant %q: %w", truncate(g.ID), err)
	}
	if last == 0 {
		rev, err := s.grants.Create(ctx, key(g.ID), val, jetstream.KeyTTL(ttl))
		if isWrongLastSeq(err) {
			return 0, ErrExists
		} else if err != nil {
			return 0, fmt.Errorf("state: put grant %q: %w", truncate(g.ID), err)
		}
		return rev, nil
	}
	m := nats.NewMsg("$KV." + bucketName("grants", s.cfg.Space) + "." + key(g.ID))
	m.Data = val
	ack, err := s.js.PublishMsg(ctx, m, jetstream.WithMsgTTL(ttl), jetstream.WithExpectLastSequencePerSubject(last))
	if isWrongLastSeq(err) {
		return 0, ErrConflict
	} else if err != nil {
		return 0, fmt.Errorf("state: update grant %q: %w", truncate(g.ID), err)
	}
	return ack.Sequence, nil
}

func decodeGrant(e jetstream.KeyValueEntry) (*Grant, error) {
	var g Grant
	if err := json.Unmarshal(e.Value(), &g); err != nil {
		return nil, fmt.Errorf("state: decode grant %s: %w", e.Key(), err)
	}
	g.StoreRevision = e.Revision()
	return &g, nil
}

// GrantChange is one event of WatchGrants.
type GrantChange struct {
	// Grant is the grant as written; nil when it was removed (its record
	// outlived its keep time) or is unreadable.
	Grant *Grant
	// ID is the removed grant's id, when Grant is nil.
	ID string
	// Current marks the end of the grants stored when the watch began:
	// from then on every event is a change.
	Current bool
}

// WatchGrants reports every stored grant, then a Current event, then every
// change, until ctx ends or the store closes; then the channel is closed.
// It is how a member keeps the group's grants in memory: a grant created
// or revoked by another member reaches it within the watch's delivery
// time, and a decision never waits on a store read. A closed channel while
// ctx is live means the watch ended (a lost connection): call again, and
// rebuild from its first events.
func (s *Store) WatchGrants(ctx context.Context) (<-chan GrantChange, error) {
	// The grants stored now, as the stream's leader has them, then every
	// write after the last it had: a watcher's own first values come from
	// whichever replica its consumer is on, which may lag the leader (a
	// grant just written was missed, and a revoked one could read as
	// live until the replica caught up).
	entries, last, err := s.snapshotAt(ctx, s.grants)
	if err != nil {
		return nil, fmt.Errorf("state: read grants: %w", err)
	}
	conv := func(e jetstream.KeyValueEntry) (GrantChange, bool) {
		var c GrantChange
		switch {
		case e == nil:
			return c, false // the watcher's end of its first values: ours is sent
		case e.Operation() != jetstream.KeyValuePut:
			c.ID, _ = idOf(e.Key())
		default:
			g, err := decodeGrant(e)
			if err != nil {
				s.log.Warn("unreadable grant record skipped", "key", e.Key(), "err", err)
				c.ID, _ = idOf(e.Key())
			} else {
				c.Grant = g
			}
		}
		return c, true
	}
	first := make([]GrantChange, 0, len(entries)+1)
	for _, e := range entries {
		if c, ok := conv(e); ok {
			first = append(first, c)
		}
	}
	first = append(first, GrantChange{Current: true})
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	w, err := s.grants.WatchAll(ctx, jetstream.ResumeFromRevision(last+1))
	if err != nil {
		return nil, fmt.Errorf("state: watch grants: %w", err)
	}
	return forwardAfter(s, ctx, w, first, conv), nil
}
