package state

import (
	"testing"
	"time"
)

// TestHeldCallsExpire: the sweep deletes the entries whose deadline has
// passed (a deadline of now included, as Get counts it) and keeps the
// others.
func TestHeldCallsExpire(t *testing.T) {
	ctx := ctxT(t)
	s := clusterStore(t, uniqueSpace(t), "m1")
	t.Cleanup(func() { s.js.DeleteKeyValue(ctx, bucketName("held", s.cfg.Space)) })
	h, err := s.HeldCalls(ctx)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	put := func(key, id string, deadline time.Time) {
		t.Helper()
		if err := h.Put(ctx, key, HeldCall{ProposalID: id, Member: "m1", Deadline: deadline}); err != nil {
			t.Fatal(err)
		}
	}
	put("past", "p1", now.Add(-time.Second))
	put("future", "p2", now.Add(time.Hour))
	put("edge", "p3", now) // a deadline of now has passed (Get says so)
	if n, err := h.Expire(ctx, now); err != nil || n != 2 {
		t.Fatalf("Expire = %d, %v; want the 2 entries past their deadline", n, err)
	}
	for key, want := range map[string]string{"past": "", "edge": "", "future": "p2"} {
		c, ok, err := h.Get(ctx, key, time.Unix(0, 0))
		if err != nil || ok != (want != "") || c.ProposalID != want {
			t.Errorf("after Expire, %s: %+v %v %v; want %q", key, c, ok, err, want)
		}
	}
	if n, err := h.Expire(ctx, now); err != nil || n != 0 {
		t.Errorf("Expire again = %d, %v; want nothing left to delete", n, err)
	}

}
