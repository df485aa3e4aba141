package state

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// An operator's cancel on member B takes A's record: the owner becomes B
// at a new revision, and A, which still holds the old revision, can
// neither update nor delete it any more (its fence). A record whose
// fulfilment request is written is refused and left as it was; an unknown
// id is ErrNotFound; a take that raced a write of the owner is
// ErrConflict and nothing is written.
func TestTakeMovesTheRecordAndFencesTheOwner(t *testing.T) {
	t.Parallel() // a space of its own on the shared cluster
	space := uniqueSpace(t)
	a := clusterStore(t, space, "A")
	b := clusterStore(t, space, "B")
	ctx := ctxT(t)

	// A hostile id (subject separators) behaves like any other.
	rec := samplePending("p.1 >", "A")
	if err := a.Put(ctx, rec); err != nil {
		t.Fatal(err)
	}
	taken, err := b.Take(ctx, "p.1 >")
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	if taken.Owner != "B" || taken.Rev <= rec.Rev || taken.ID != "p.1 >" ||
		len(taken.Prompts) != 1 || taken.Prompts[0].EnvelopeID != "e-1" || taken.DecisionID != "d-1" {
		t.Errorf("taken = %+v (A wrote revision %d), want owner B at a newer revision, prompts and decision kept", taken, rec.Rev)
	}
	got, err := a.Get(ctx, "p.1 >")
	if err != nil || got.Owner != "B" || got.Rev != taken.Rev {
		t.Fatalf("record after the take = %+v, %v; want owner B at revision %d", got, err, taken.Rev)
	}
	stale := *rec
	stale.Phase = Queued
	if err := a.Update(ctx, &stale); !errors.Is(err, ErrConflict) {
		t.Errorf("former owner's Update = %v, want ErrConflict", err)
	}
	if err := a.Delete(ctx, rec); !errors.Is(err, ErrConflict) {
		t.Errorf("former owner's Delete = %v, want ErrConflict", err)
	}
	if err := b.Delete(ctx, taken); err != nil {
		t.Errorf("taker's Delete: %v", err)
	}
	if _, err := b.Take(ctx, "p.1 >"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Take of an ended proposal = %v, want ErrNotFound", err)
	}
	if _, err := b.Take(ctx, "never-pending"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Take of an unknown id = %v, want ErrNotFound", err)
	}

	// A fulfilment request written: refused, record untouched.
	inflight := samplePending("in-flight", "A")
	inflight.Phase = Fulfilling
	inflight.Request = &Request{EnvelopeID: "req-1", RPCID: 9, Target: "tools", SentAt: time.Now().UTC()}
	if err := a.Put(ctx, inflight); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Take(ctx, "in-flight"); !errors.Is(err, ErrFulfilling) {
		t.Errorf("Take of a record with its request written = %v, want ErrFulfilling", err)
	}
	if got, err := a.Get(ctx, "in-flight"); err != nil || got.Owner != "A" || got.Rev != inflight.Rev {
		t.Errorf("refused take changed the record: %+v, %v", got, err)
	}

	// A long (hashed-key) id is taken like a short one.
	long := samplePending(strings.Repeat("L", maxPlainID+1), "A")
	if err := a.Put(ctx, long); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Take(ctx, long.ID); err != nil || got.Owner != "B" {
		t.Errorf("Take of a long id = %+v, %v", got, err)
	}
}

// A take and the owner's own write race on one revision: exactly one
// wins. Here the owner wrote first, so the take (which read before it)
// conflicts, and the record stays the owner's.
func TestTakeLosesToAConcurrentWrite(t *testing.T) {
	t.Parallel() // a space of its own on the shared cluster
	space := uniqueSpace(t)
	a := clusterStore(t, space, "A")
	b := clusterStore(t, space, "B")
	ctx := ctxT(t)
	rec := samplePending("racy", "A")
	if err := a.Put(ctx, rec); err != nil {
		t.Fatal(err)
	}
	// What Take does, split at its read: the owner writes in between.
	e, err := b.pending.Get(ctx, key("racy"))
	if err != nil {
		t.Fatal(err)
	}
	rec.Approvals = append(rec.Approvals, Approval{Approver: "alice", At: time.Now().UTC()})
	if err := a.Update(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pending.Update(ctx, key("racy"), e.Value(), e.Revision()); !isWrongLastSeq(err) {
		t.Fatalf("stale compare-and-set = %v, want a conflict", err)
	}
	// Take itself reads again, so it wins now, with the approval kept.
	got, err := b.Take(ctx, "racy")
	if err != nil || got.Owner != "B" || len(got.Approvals) != 1 {
		t.Fatalf("Take after the owner's write = %+v, %v", got, err)
	}
	if err := a.Update(ctx, rec); !errors.Is(err, ErrConflict) {
		t.Errorf("owner's next Update = %v, want ErrConflict", err)
	}
}

// WatchRecords tells the owner that its record was written by someone
// else: after its own Put (revision r) it sees the take at a revision
// above r, then the taker's delete as a removal. Its own writes come
// through too, at the revisions it got back (which is how it tells them
// apart).
func TestWatchRecordsReportsATake(t *testing.T) {
	t.Parallel() // a space of its own on the shared cluster
	space := uniqueSpace(t)
	a := clusterStore(t, space, "A")
	b := clusterStore(t, space, "B")
	ctx := ctxT(t)
	changes, err := a.WatchRecords(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next := func() RecordChange {
		t.Helper()
		select {
		case c, ok := <-changes:
			if !ok {
				t.Fatal("watch closed")
			}
			return c
		case <-time.After(30 * time.Second):
			t.Fatal("no change reported within 30s")
		}
		return RecordChange{}
	}
	rec := samplePending("w.1", "A")
	if err := a.Put(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if c := next(); c != (RecordChange{ProposalID: "w.1", Revision: rec.Rev}) {
		t.Errorf("own put reported as %+v, want revision %d", c, rec.Rev)
	}
	taken, err := b.Take(ctx, "w.1")
	if err != nil {
		t.Fatal(err)
	}
	if c := next(); c != (RecordChange{ProposalID: "w.1", Revision: taken.Rev}) || c.Revision <= rec.Rev {
		t.Errorf("take reported as %+v, want revision %d > %d", c, taken.Rev, rec.Rev)
	}
	if err := b.Delete(ctx, taken); err != nil {
		t.Fatal(err)
	}
	if c := next(); c.ProposalID != "w.1" || !c.Removed || c.Revision <= taken.Rev {
		t.Errorf("delete reported as %+v, want a removal after revision %d", c, taken.Rev)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case _, ok := <-changes:
		if ok {
			t.Error("change reported after Close")
		}
	case <-time.After(10 * time.Second):
		t.Error("watch not closed by Close")
	}
}
