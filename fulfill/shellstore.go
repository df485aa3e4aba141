package fulfill

import (
	"context"
	"errors"
	"sync"

	"github.com/mewkit/fulfiller/fulfill/lifecycle"
)

// ownWrites is the shell's lifecycle.Store: the record store, remembering
// the revision of each record this member last wrote, so that a change to
// a record the group's watch reports (WatchRecords) is known to be
// another member's (an operator's take there, an adoption) and the
// proposal is released here at once. A change read while this member's
// own write of the record is in flight is judged once the write's
// revision is known (its own echo is not someone else's): the check waits
// for the writes counted in flight, and no lock is held across the
// store's write (a NATS round trip).
type ownWrites struct {
	lifecycle.Store
	// failed hears of each write that failed, whatever the store said
	// (unavailable, refused, or a conflict): shutdown waits no longer for
	// that proposal.
	failed func(proposalID string)
	// track: the store is shared, so the group's watch asks theirs.
	// Alone on its store nobody else writes this member's records and
	// nothing asks: a write is only the store's (no map entry, no lock
	// per write).
	track bool

	mu   sync.Mutex
	revs map[string]*ownRev
}

type ownRev struct {
	mu sync.Mutex
	// idle is signalled (on mu) when writing falls to zero: a check of a
	// change waits for it.
	idle sync.Cond
	// writing counts this member's writes of the record in flight.
	writing int
	rev     uint64 // the highest revision this member wrote or read
	// done: this member's delete ended the record, or a write found it
	// another's (the core settles that itself, Reload): no change seen
	// after is another member's taking it. A delete's revision is not
	// known here, and a watcher that read it while the delete was being
	// written took it for another member's write.
	done bool
}

func newOwnWrites(st lifecycle.Store, track bool) *ownWrites {
	return &ownWrites{Store: st, track: track, revs: map[string]*ownRev{}}
}

func (o *ownWrites) rev(id string) *ownRev {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := o.revs[id]
	if r == nil {
		r = &ownRev{}
		r.idle.L = &r.mu
		o.revs[id] = r
	}
	return r
}

func (o *ownWrites) forget(id string) {
	o.mu.Lock()
	delete(o.revs, id)
	o.mu.Unlock()
}

// Write implements lifecycle.Store.
func (o *ownWrites) Write(ctx context.Context, w lifecycle.Write) (uint64, error) {
	if !o.track {
		rev, err := o.Store.Write(ctx, w)
		if err != nil && o.failed != nil && !errors.Is(err, lifecycle.ErrConflict) && !errors.Is(err, lifecycle.ErrExists) {
			o.failed(w.ID)
		}
		return rev, err
	}
	r := o.rev(w.ID)
	r.mu.Lock()
	r.writing++
	r.mu.Unlock()
	rev, err := o.Store.Write(ctx, w)
	ended := false
	r.mu.Lock()
	switch {
	case err == nil && w.Record == nil, errors.Is(err, lifecycle.ErrConflict), errors.Is(err, lifecycle.ErrExists):
		r.done = true
		ended = true
	case err == nil:
		r.rev = max(r.rev, rev) // a write that returned late does not go back
	}
	r.writing--
	if r.writing == 0 {
		r.idle.Broadcast()
	}
	r.mu.Unlock()
	if ended {
		o.forget(w.ID)
		return rev, err
	}
	if err != nil && o.failed != nil {
		o.failed(w.ID)
	}
	return rev, err
}

// Owned implements lifecycle.Store.
// Immediate is its store's (lifecycle.Immediate): the revisions kept
// here are taken under leaf locks only.
func (o *ownWrites) Immediate(e lifecycle.Effect) bool {
	i, ok := o.Store.(lifecycle.Immediate)
	return ok && i.Immediate(e)
}

func (o *ownWrites) Owned(ctx context.Context) ([]lifecycle.Proposal, error) {
	recs, err := o.Store.Owned(ctx)
	o.held(recs)
	return recs, err
}

// held notes the revisions of records this member takes over (resumed,
// adopted, taken).
func (o *ownWrites) held(recs []lifecycle.Proposal) {
	if !o.track {
		return
	}
	for _, p := range recs {
		r := o.rev(p.ID)
		r.mu.Lock()
		r.rev = max(r.rev, p.Rev)
		r.mu.Unlock()
	}
}

// theirs reports whether a change to record id at revision rev is
// another member's: this member holds the record and did not write that
// revision.
func (o *ownWrites) theirs(id string, rev uint64) bool {
	r := o.lookup(id)
	return r != nil && r.theirs(rev) // nil: not held here
}

// lookup is the revision kept of record id (nil: none).
func (o *ownWrites) lookup(id string) *ownRev {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.revs[id]
}

// theirs is ownWrites.theirs for the record r keeps: it waits for the
// writes of r under way, one of which may be the very change the watcher
// read.
func (r *ownRev) theirs(rev uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.writing > 0 {
		r.idle.Wait()
	}
	return !r.done && rev > r.rev
}
