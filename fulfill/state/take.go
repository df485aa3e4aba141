package state

import (
	"context"
	"errors"
	"fmt"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrFulfilling: Take found the record's fulfilment request written. The
// call may be running at its tool owner; the proposal cannot be taken
// back, by an operator or anyone else.
var ErrFulfilling = errors.New("state: the record's fulfilment request is written")

// ErrAnswered: Take found the record in phase Answered: its reject is
// being written, and whoever resumes the record sends that reject again.
var ErrAnswered = errors.New("state: the record's reject is being written")

// Take moves the record of proposalID to this member by compare-and-set,
// whoever owns it and whether or not that owner's lease is live: an
// operator's cancel on any member of the group ends the proposal from
// there (docs/design.md "Durable and shared pending work": the operator API of any
// member cancels the group's pending work). It returns the record as
// taken (Owner this member, Rev the new revision).
//
// The former owner is fenced by the same compare-and-set that fences an
// adopted member: its next Update or Delete of the record fails with
// ErrConflict, so it can neither record a fulfilment request nor answer.
// Take refuses (ErrAnswered) a record whose reject is being written, and
// (ErrFulfilling) a record whose Request is written, and
// since the owner records Request before it sends the call, a taken
// record's call is never sent.
//
// ErrNotFound: no such record (never pending, or ended). ErrConflict: the
// record changed between the read and the write (its owner recorded a
// prompt or an approval): read again and retry.
func (s *Store) Take(ctx context.Context, proposalID string) (p *lifecycle.Proposal, err error) {
	start := time.Now()
	defer func() {
		// A refused take is an answer, not a failing store.
		measured := err
		if errors.Is(measured, ErrFulfilling) || errors.Is(measured, ErrAnswered) {
			measured = nil
		}
		s.timed("take", start, &measured)
	}()
	k := key(proposalID)
	e, err := s.records.get(ctx, k)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, ErrNotFound
		}
		return nil, fmt.Errorf("state: take %q: %w", truncate(proposalID), err)
	}
	p, err = decodeRecord(e)
	if err != nil {
		return nil, err
	}
	if p.Phase == Answered {
		return nil, ErrAnswered
	}
	if p.Request != nil {
		return nil, ErrFulfilling
	}
	p.Owner = s.cfg.Member
	val, err := encodeRecord(p)
	if err != nil {
		return nil, err
	}
	rev, err := s.records.update(ctx, k, val, e.Revision())
	switch {
	case err == nil:
		p.Rev = rev
		return p, nil
	case isWrongLastSeq(err):
		return nil, ErrConflict
	}
	// The write may have been applied although its ack was lost. If the
	// record is ours and still has no request, it is taken (by this call
	// or an earlier one: either way this member holds it now).
	if cur, gerr := s.records.get(ctx, k); gerr == nil {
		if got, derr := decodeRecord(cur); derr == nil && got.Owner == s.cfg.Member && got.Request == nil {
			return got, nil
		}
	}
	return nil, fmt.Errorf("state: take %q: %w", truncate(proposalID), err)
}

// RecordChange is one write to the group's pending records, as
// WatchRecords reports it: no value, only which record and at which
// revision.
type RecordChange struct {
	// ProposalID is the record's proposal id; "" for ids longer than the
	// plain-key limit (180 bytes), whose keys are hashes.
	ProposalID string
	Revision   uint64
	// Removed: the record was deleted (its proposal ended).
	Removed bool
}

// WatchRecords reports every write to the group's pending records from now
// on (metadata only: the values stay on the server), until ctx ends or the
// store closes; then the channel is closed. It is how a member learns at
// once that a record it holds was written by someone else (taken by
// another member's operator, or adopted after this member's lease
// lapsed): a change at a revision newer than its own last write of that
// record is not its own. Without it the member learns only at its next
// write (ErrConflict), and meanwhile holds the proposal's slot and its
// timers. A closed channel while ctx is live means the watch ended (a
// lost connection): call again.
func (s *Store) WatchRecords(ctx context.Context) (<-chan RecordChange, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if s.pending == nil {
		// Alone (recordLog): only this member writes the records.
		return closedAtEnd[RecordChange](ctx), nil
	}
	w, err := s.pending.WatchAll(ctx, jetstream.UpdatesOnly(), jetstream.MetaOnly())
	if err != nil {
		return nil, fmt.Errorf("state: watch pending records: %w", err)
	}
	return forward(s, ctx, w, func(e jetstream.KeyValueEntry) (RecordChange, bool) {
		if e == nil {
			return RecordChange{}, false
		}
		c := RecordChange{Revision: e.Revision(), Removed: e.Operation() != jetstream.KeyValuePut}
		c.ProposalID, _ = idOf(e.Key())
		return c, true
	}), nil
}

// forward turns a watcher's updates into events, conv deciding each one
// (nil marks the end of the initial values; ok false drops it), on a
// buffered channel closed when ctx ends, the store closes or the watch
// ends. The goroutine it starts is the store's (Close waits for it).
// The caller holds s.mu and has checked that the store is open.
func forward[T any](s *Store, ctx context.Context, w jetstream.KeyWatcher, conv func(jetstream.KeyValueEntry) (T, bool)) <-chan T {
	return forwardAfter(s, ctx, w, nil, conv)
}

// forwardAfter is forward that sends first before the watcher's updates.
func forwardAfter[T any](s *Store, ctx context.Context, w jetstream.KeyWatcher, first []T, conv func(jetstream.KeyValueEntry) (T, bool)) <-chan T {
	out := make(chan T, 64)
	s.watchers.Add(1)
	send := func(c T) bool { return sendOpen(ctx, s, out, c) }
	go func() {
		defer s.watchers.Done()
		defer close(out)
		defer w.Stop()
		for _, c := range first {
			if !send(c) {
				return
			}
		}
		for {
			select {
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if c, ok := conv(e); ok && !send(c) {
					return
				}
			case <-ctx.Done():
				return
			case <-s.stop:
				return
			}
		}
	}()
	return out
}

// sendOpen sends v on out, a watch's events, and reports whether it was
// sent before ctx ended or the store closed (then the watch ends).
func sendOpen[T any](ctx context.Context, s *Store, out chan<- T, v T) bool {
	select {
	case out <- v:
		return true
	case <-ctx.Done():
	case <-s.stop:
	}
	return false
}
