package fulfill

import (
	"context"
	"testing"

	"github.com/mewkit/fulfiller/fulfill/lifecycle"
)

// gatedStore is a lifecycle.Store whose writes return the revisions it is
// given, each once the test lets it through.
type gatedStore struct {
	lifecycle.Store
	started chan lifecycle.Write
	finish  chan uint64
}

func (g *gatedStore) Write(_ context.Context, w lifecycle.Write) (uint64, error) {
	g.started <- w
	return <-g.finish, nil
}

// A change the record watcher reads while this member's own write of
// that change is still returning is not another member's: not for an
// update (its revision is known once the write returns), and not for the
// delete that ends the record, whose revision the store does not report.
// Taken for another's, the delete's change released a proposal just
// answered, and its ignored line ("adopted_elsewhere") followed its reject
// in the decision log.
func TestOwnWritesAreNotTheirs(t *testing.T) {
	t.Parallel()
	g := &gatedStore{started: make(chan lifecycle.Write), finish: make(chan uint64)}
	o := newOwnWrites(g, true)
	write := func(w lifecycle.Write, rev uint64) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			if _, err := o.Write(t.Context(), w); err != nil {
				t.Error(err)
			}
		}()
		<-g.started
		// The watcher reads the change while the write is returning: it
		// found the record held here, and waits for the write.
		r := o.lookup(w.ID)
		theirs := make(chan bool)
		go func() { theirs <- r.theirs(rev) }()
		g.finish <- rev
		<-done
		if <-theirs {
			t.Errorf("this member's own write at revision %d (record %v) taken for another member's", rev, w.Record != nil)
		}
	}
	rec := &lifecycle.Proposal{ID: "p1"}
	write(lifecycle.Write{ID: "p1", Record: rec, Create: true}, 1)
	write(lifecycle.Write{ID: "p1", Record: rec, Rev: 1}, 2)
	if !o.theirs("p1", 3) {
		t.Error("a later revision of a record held here, not written by this member, is not taken for another's")
	}
	write(lifecycle.Write{ID: "p1", Rev: 2}, 3) // the delete: its marker is revision 3
}

// A record's write holds no lock across the store's write (a NATS round
// trip on the shared store): while it is in flight the record's revision
// can still be noted (an adoption, Owned) and the check of a change waits
// for the write, not for the lock.
func TestOwnWritesHoldNoLockAcrossTheStore(t *testing.T) {
	t.Parallel()
	g := &gatedStore{started: make(chan lifecycle.Write), finish: make(chan uint64)}
	o := newOwnWrites(g, true)
	rec := &lifecycle.Proposal{ID: "p1"}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := o.Write(t.Context(), lifecycle.Write{ID: "p1", Record: rec, Create: true}); err != nil {
			t.Error(err)
		}
	}()
	<-g.started
	// Under a lock held across the write, this would wait for it (and
	// the test would never let it through).
	o.held([]lifecycle.Proposal{{ID: "p1", Rev: 1}})
	theirs := make(chan bool)
	go func() { theirs <- o.theirs("p1", 2) }()
	g.finish <- 2
	<-done
	if <-theirs {
		t.Error("this member's own write at revision 2, read while in flight, taken for another member's")
	}
	if !o.theirs("p1", 3) {
		t.Error("a later revision of a record held here, not written by this member, is not taken for another's")
	}
}
