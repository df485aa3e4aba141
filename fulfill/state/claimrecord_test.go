package state

import (
	"errors"
	"fmt"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"sync"
	"sync/atomic"
	"testing"
)

func claimRec(id, claim string) *lifecycle.Proposal {
	return &lifecycle.Proposal{ID: id, Envelope: []byte(`{"id":"` + id + `"}`), From: "coder", Phase: Deciding, Claim: claim}
}

// TestClaimRecord: the claim is the record (one create-if-absent in the
// pending bucket carrying the owner and the claim's decision id), and the
// seen key keeps the id claimed after the record ends (rule 5), with the
// original decision id for a replay's ignored line (rule 10).
func TestClaimRecord(t *testing.T) {
	t.Parallel() // a space of its own on the shared cluster
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			s := b.open(t, "m1")
			ctx := ctxT(t)
			p := claimRec("p1", "d1")
			won, winner, err := s.ClaimRecord(ctx, p)
			if err != nil || !won || winner != "d1" {
				t.Fatalf("ClaimRecord = %v, %q, %v; want won under d1", won, winner, err)
			}
			got, err := s.Get(ctx, "p1")
			if err != nil || got.Owner != "m1" || got.Claim != "d1" || got.Phase != Deciding || got.Rev != p.Rev {
				t.Fatalf("record = %+v, %v; want m1's, claim d1, deciding, revision %d", got, err, p.Rev)
			}
			// A replay (or a peer) while the record is pending: lost, the
			// winner's decision id, the record untouched.
			if won, winner, err := s.ClaimRecord(ctx, claimRec("p1", "d2")); err != nil || won || winner != "d1" {
				t.Fatalf("second ClaimRecord = %v, %q, %v; want lost to d1", won, winner, err)
			}
			if won, winner, err := s.ClaimDecision(ctx, "p1", "d3"); err != nil || won || winner != "d1" {
				t.Fatalf("ClaimDecision of a claimed record = %v, %q, %v; want lost to d1", won, winner, err)
			}
			// After the record ends, a replay is still lost, and leaves no record.
			if err := s.Delete(ctx, p); err != nil {
				t.Fatal(err)
			}
			if won, winner, err := s.ClaimRecord(ctx, claimRec("p1", "d4")); err != nil || won || winner != "d1" {
				t.Fatalf("ClaimRecord after the end = %v, %q, %v; want lost to d1", won, winner, err)
			}
			if recs, err := s.List(ctx); err != nil || len(recs) != 0 {
				t.Fatalf("records after a lost replay = %+v, %v; want none", recs, err)
			}
			// A claim without a record (a "busy" reject) wins the id: a
			// later ClaimRecord loses and leaves no record.
			if won, _, err := s.ClaimDecision(ctx, "busy-1", "d5"); err != nil || !won {
				t.Fatalf("ClaimDecision = %v, %v", won, err)
			}
			if won, winner, err := s.ClaimRecord(ctx, claimRec("busy-1", "d6")); err != nil || won || winner != "d5" {
				t.Fatalf("ClaimRecord after a record-less claim = %v, %q, %v; want lost to d5", won, winner, err)
			}
			if _, err := s.Get(ctx, "busy-1"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("record of a lost claim: %v, want ErrNotFound", err)
			}
			// Concurrent claimers of one id: exactly one wins, one record.
			var wins atomic.Int32
			var wg sync.WaitGroup
			for i := range 8 {
				wg.Go(func() {
					won, _, err := s.ClaimRecord(ctx, claimRec("contended", fmt.Sprintf("c%d", i)))
					if err != nil {
						t.Error(err)
					}
					if won {
						wins.Add(1)
					}
				})
			}
			wg.Wait()
			if wins.Load() != 1 {
				t.Fatalf("%d winners, want 1", wins.Load())
			}
			if recs, err := s.List(ctx); err != nil || len(recs) != 1 || recs[0].ID != "contended" {
				t.Fatalf("records = %+v, %v; want the contended one", recs, err)
			}
		})
	}
}

// TestReclaim: a crash between ClaimRecord's two writes leaves a record
// whose seen key is missing; Reclaim writes it, so a replay is still
// recognised after the record ends. A record written as a replay of an
// ended proposal (its seen key holds another claim) is not the caller's.
func TestReclaim(t *testing.T) {
	t.Parallel() // a space of its own on the shared cluster
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			s := b.open(t, "m1")
			ctx := ctxT(t)
			p := claimRec("p1", "d1") // the record alone: the crash came before the seen key
			if err := s.Put(ctx, p); err != nil {
				t.Fatal(err)
			}
			if ours, err := s.Reclaim(ctx, p); err != nil || !ours {
				t.Fatalf("Reclaim = %v, %v; want ours", ours, err)
			}
			if ours, err := s.Reclaim(ctx, p); err != nil || !ours {
				t.Fatalf("Reclaim again = %v, %v; want ours", ours, err)
			}
			if won, winner, err := s.ClaimDecision(ctx, "p1", "d2"); err != nil || won || winner != "d1" {
				t.Fatalf("ClaimDecision after Reclaim = %v, %q, %v; want lost to d1", won, winner, err)
			}
			if won, _, err := s.ClaimDecision(ctx, "p2", "d3"); err != nil || !won {
				t.Fatal(won, err)
			}
			q := claimRec("p2", "d4") // a replay's record, written before the crash
			if err := s.Put(ctx, q); err != nil {
				t.Fatal(err)
			}
			if ours, err := s.Reclaim(ctx, q); err != nil || ours {
				t.Fatalf("Reclaim of a replay's record = %v, %v; want not ours", ours, err)
			}
			// Records of older fulfillers (claimed apart) are theirs.
			if ours, err := s.Reclaim(ctx, &lifecycle.Proposal{ID: "p3"}); err != nil || !ours {
				t.Fatalf("Reclaim of a record without a claim = %v, %v; want ours", ours, err)
			}
		})
	}
}
