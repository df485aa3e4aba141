package state

import (
	"context"
	"errors"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"testing"
)

// TestLocalKeepsTheStoreContract checks, for the in-process store, the
// parts of Store's contract the Fulfiller relies on: one claim per id,
// compare-and-set, a request written once, take's refusals.
func TestLocalKeepsTheStoreContract(t *testing.T) {
	ctx := context.Background()
	l := NewLocal("f1")

	p := &lifecycle.Proposal{ID: "p1", From: "a", Phase: Deciding, Claim: "d1", DecisionID: "d1"}
	if won, winner, err := l.ClaimRecord(ctx, p); !won || winner != "d1" || err != nil {
		t.Fatalf("first claim = %v %q %v, want won d1", won, winner, err)
	}
	if p.Owner != "f1" || p.Rev == 0 {
		t.Fatalf("claimed record owner %q revision %d", p.Owner, p.Rev)
	}
	// A replay (another decision id) loses to the record's claim, and so
	// does a claim without a record.
	if won, winner, _ := l.ClaimRecord(ctx, &lifecycle.Proposal{ID: "p1", Claim: "d2"}); won || winner != "d1" {
		t.Fatalf("replayed claim = %v %q, want lost to d1", won, winner)
	}
	if won, winner, _ := l.ClaimDecision(ctx, "p1", "d3"); won || winner != "d1" {
		t.Fatalf("ClaimDecision of a claimed id = %v %q, want lost to d1", won, winner)
	}
	if _, _, err := l.ClaimRecord(ctx, &lifecycle.Proposal{ID: "p9"}); err == nil {
		t.Fatal("a claim without a decision id was taken")
	}

	// Compare and set: a stale revision conflicts.
	stale := *p
	p.Phase = AwaitingApproval
	if err := l.Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	stale.Phase = Queued
	if err := l.Update(ctx, &stale); !errors.Is(err, ErrConflict) {
		t.Fatalf("update at a stale revision: %v, want ErrConflict", err)
	}

	// A written request is never rewritten, and a take refuses its record.
	p.Phase, p.Request = Fulfilling, &Request{EnvelopeID: "r1", RPCID: 7, Target: "fs"}
	if err := l.Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	p.Request = &Request{EnvelopeID: "r2", RPCID: 8, Target: "fs"}
	if err := l.Update(ctx, p); !errors.Is(err, ErrRequestRewritten) {
		t.Fatalf("rewritten request: %v, want ErrRequestRewritten", err)
	}
	if _, err := l.Take(ctx, "p1"); !errors.Is(err, ErrFulfilling) {
		t.Fatalf("take of a fulfilling record: %v, want ErrFulfilling", err)
	}

	// Records read are copies: changing one changes nothing stored.
	got, err := l.Get(ctx, "p1")
	if err != nil {
		t.Fatal(err)
	}
	got.Request.RPCID = 99
	if again, _ := l.Get(ctx, "p1"); again.Request.RPCID != 7 {
		t.Fatalf("stored request changed through a copy: rpc id %d", again.Request.RPCID)
	}

	// Answered: MarkAnswered wants its reject; a take refuses it.
	q := &lifecycle.Proposal{ID: "p2", Phase: Deciding, Claim: "d4", DecisionID: "d4"}
	if won, _, _ := l.ClaimRecord(ctx, q); !won {
		t.Fatal("p2 not claimed")
	}
	q.Phase = Answered
	if err := l.MarkAnswered(ctx, q); err == nil {
		t.Fatal("MarkAnswered without a reject was taken")
	}
	q.Reject = &Reject{EnvelopeID: "e1", Reason: "policy"}
	if err := l.MarkAnswered(ctx, q); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Take(ctx, "p2"); !errors.Is(err, ErrAnswered) {
		t.Fatalf("take of an answered record: %v, want ErrAnswered", err)
	}
	// A committed relay, and the reject, are copied too.
	q.Relay = &Relay{EnvelopeID: "r1", RPCID: 3}
	if err := l.Update(ctx, q); err != nil {
		t.Fatal(err)
	}
	read, _ := l.Get(ctx, "p2")
	read.Relay.RPCID, read.Reject.Reason = 99, "other"
	if again, _ := l.Get(ctx, "p2"); again.Relay.RPCID != 3 || again.Reject.Reason != "policy" {
		t.Fatalf("stored answers changed through a copy: relay %+v, reject %+v", *again.Relay, *again.Reject)
	}
	if ps, _ := l.Owned(ctx); len(ps) != 2 || ps[0].ID != "p1" || ps[1].ID != "p2" {
		t.Fatalf("Owned = %v, want p1 p2", ps)
	}

	// Delete compares and sets too; the id stays claimed after it.
	if err := l.Delete(ctx, &lifecycle.Proposal{ID: "p2", Rev: q.Rev - 1}); !errors.Is(err, ErrConflict) {
		t.Fatalf("delete at a stale revision: %v, want ErrConflict", err)
	}
	if err := l.Delete(ctx, q); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Get(ctx, "p2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted record read: %v, want ErrNotFound", err)
	}
	if won, winner, _ := l.ClaimRecord(ctx, &lifecycle.Proposal{ID: "p2", Claim: "d5"}); won || winner != "d4" {
		t.Fatalf("claim of an ended id = %v %q, want lost to d4", won, winner)
	}
	// Resuming a record: its own claim holds the id.
	if ours, _ := l.Reclaim(ctx, p); !ours {
		t.Fatal("Reclaim of p1's own claim: not ours")
	}
	if ours, _ := l.Reclaim(ctx, &lifecycle.Proposal{ID: "p2", Claim: "d5"}); ours {
		t.Fatal("Reclaim of a replay's record: ours")
	}
}

func TestLocalWatchesEndWithTheirContext(t *testing.T) {
	l := NewLocal("f1")
	ctx, cancel := context.WithCancel(context.Background())
	lapsed, _ := l.WatchLapsed(ctx)
	records, _ := l.WatchRecords(ctx)
	select {
	case <-lapsed:
		t.Fatal("a lapse was reported with no other member")
	case <-records:
		t.Fatal("a record change was reported with no other writer")
	default:
	}
	cancel()
	if _, ok := <-lapsed; ok {
		t.Fatal("WatchLapsed sent a value")
	}
	if _, ok := <-records; ok {
		t.Fatal("WatchRecords sent a value")
	}
}
