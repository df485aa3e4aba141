package state

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestReadsAreCurrent: what one member has written (and been acknowledged
// for) is what any member reads next, at once: a new lease in Members, a
// record's latest revision and owner in List, a queued answer in Outbox.
// Members, List and Outbox decide adoption, recovery and the operator's
// view; a read served by a replica that lags the stream's leader missed a
// lease just written (the flake "Members = [A], want A B C") and returned
// a record's previous owner. Many rounds, because a lagging replica is a
// matter of timing.
func TestReadsAreCurrent(t *testing.T) {
	t.Parallel() // a space of its own on the shared cluster
	space := uniqueSpace(t)
	a := clusterStore(t, space, "A")
	b := clusterStore(t, space, "B")
	ctx := ctxT(t)
	p := samplePending("moving", "A")
	if err := a.Put(ctx, p); err != nil {
		t.Fatal(err)
	}
	const rounds = 60
	for i := range rounds {
		// A record changes hands (as Adopt or Take moves it) and the other
		// member reads the group's records at once.
		writer, reader := a, b
		if i%2 == 1 {
			writer, reader = b, a
		}
		if _, err := writer.Get(ctx, p.ID); err != nil {
			t.Fatal(err)
		}
		p.Owner = writer.Member()
		p.Size = i
		cur, err := writer.Get(ctx, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		p.Rev = cur.Rev
		if err := writer.Update(ctx, p); err != nil {
			t.Fatalf("round %d: Update: %v", i, err)
		}
		ps, err := reader.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ps) != 1 || ps[0].Rev != p.Rev || ps[0].Owner != writer.Member() || ps[0].Size != i {
			var got []string
			for _, q := range ps {
				got = append(got, fmt.Sprintf("%s owner %s rev %d size %d", q.ID, q.Owner, q.Rev, q.Size))
			}
			t.Fatalf("round %d: %s wrote rev %d owner %s size %d; %s's List read %v", i, writer.Member(), p.Rev, writer.Member(), i, reader.Member(), got)
		}

		// A new member's lease, and a new answer, seen at once by another.
		m := clusterStore(t, space, fmt.Sprintf("m%d", i), func(c *Config) { c.Lease = time.Minute })
		if err := m.StartLease(ctx); err != nil {
			t.Fatal(err)
		}
		ms, err := reader.Members(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(ms, func(x MemberInfo) bool { return x.ID == m.Member() }) {
			t.Fatalf("round %d: %s's lease written; %s's Members read %v", i, m.Member(), reader.Member(), ms)
		}
		if err := writer.Enqueue(ctx, fmt.Sprintf("answer-%d", i), []byte(`{"kind":"mcp/reject"}`)); err != nil {
			t.Fatal(err)
		}
		as, err := reader.allAnswers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(as) != i+1 {
			t.Fatalf("round %d: %d answers queued; %s read %d", i, i+1, reader.Member(), len(as))
		}
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
