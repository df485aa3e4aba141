package mcpserve_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent/mcpfront"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/fulfill/state"
	"github.com/mewkit/fulfiller/internal/mcpserve"
	"github.com/mewkit/fulfiller/internal/poll"
)

// TestLostCallEndedAfterItsDeadline: a drop is held on instance A for
// alice, and A dies (its cluster connection and its clients cut, as a
// kill does) before her answer; nobody retries it. Once its deadline
// has passed, exactly one of the live instances (one of one, or of two)
// ends it: its decision log says it was resumed from the lost instance
// and rejected "timeout", the other's says nothing of it, the record
// and the held-call index entry are gone from the cluster, and the
// upstream never ran it. A record of a gone instance queued to run is
// left alone. A retry after that is a new call.
func TestLostCallEndedAfterItsDeadline(t *testing.T) {
	t.Parallel()
	// Three instances: A and two that race to end its call. Two (A and
	// one to end it) only without -short.
	for _, live := range []int{2, 1} {
		if live == 1 && testing.Short() {
			continue
		}
		t.Run(fmt.Sprintf("%d live", live), func(t *testing.T) { lostCallEnded(t, live) })
	}
}

func lostCallEnded(t *testing.T, live int) {
	m := natsCluster(t)
	proxy := newCutProxy(t, m.URLs[0][len("nats://"):])
	var runs atomic.Int32
	const approval, sweep = 6 * time.Second, 200 * time.Millisecond
	tune := func(c *mcpserve.Config) {
		c.ApprovalTimeout, c.LostCallSweep, c.StateLease = approval, sweep, 2*time.Second
	}
	a := startInboxInstance(t, state.Mode{Kind: state.External, URLs: []string{"nats://" + proxy.ln.Addr().String()}}, &runs, tune)
	var others []*inboxInstance
	for range live {
		others = append(others, startInboxInstance(t, m, &runs, tune))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := state.Open(ctx, state.Config{Mode: m, Space: mcpserve.StoreSpace, Member: "test-reader"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	index, err := st.HeldCalls(ctx)
	if err != nil {
		t.Fatal(err)
	}
	key := mcpserve.CallKey(mcpfront.Proposal{Proposer: "local", Server: "tables",
		Tool: mcpfront.Tool{Name: "drop", Arguments: json.RawMessage(`{"table":"users"}`)}})
	// indexed reads the entry whatever its deadline (Get as of long ago).
	indexed := func() (state.HeldCall, bool) {
		c, ok, err := index.Get(ctx, key, time.Unix(0, 0))
		if err != nil {
			t.Fatal(err)
		}
		return c, ok
	}

	c1 := connect(t, a.url, nil)
	first := callAsync(c1.cs, "users")
	var held string
	poll.Until(t, "the drop held on A for alice, and indexed in the cluster", func() bool {
		ps := a.srv.Engine().Pending()
		if len(ps) != 1 || ps[0].State != "awaiting_approval" {
			return false
		}
		held = ps[0].ID
		c, ok := indexed()
		return ok && c.ProposalID == held
	})
	rec, err := st.Get(ctx, held)
	if err != nil {
		t.Fatal(err)
	}
	if time.Until(rec.Deadline) < time.Second {
		t.Skipf("the machine is too slow: the deadline is %v away already", time.Until(rec.Deadline))
	}
	proxy.Cut()
	a.killHTTP()
	if res := <-first; !res.IsError {
		t.Fatalf("the first call, on the killed instance: %q; want it failed", text(res))
	}
	// Cut off, A can write nothing more to the cluster (its lease
	// lapses, as a killed process's does); its stop, which waits on the
	// store's timeouts, runs meanwhile.
	go a.stop()

	poll.Until(t, "the lost call's record gone from the cluster", func() bool {
		_, err := st.Get(ctx, held)
		return errors.Is(err, state.ErrNotFound)
	})
	if now := time.Now(); now.Before(rec.Deadline) {
		t.Errorf("the record went at %v, before its deadline %v", now, rec.Deadline)
	}
	poll.Until(t, "its held-call index entry gone", func() bool { _, ok := indexed(); return !ok })

	// One instance ended it, in these words; the other logged nothing
	// of it.
	poll.Until(t, "the lost call's end logged", func() bool {
		for _, in := range others {
			for _, l := range logLines(t, in.Log) {
				if l["proposal_id"] == held {
					return true
				}
			}
		}
		return false
	})
	t.Logf("ended %v after its deadline", time.Since(rec.Deadline))
	var enders []int
	for i, in := range others {
		waitAny := func() bool {
			for _, l := range logLines(t, in.Log) {
				if l["proposal_id"] == held {
					return true
				}
			}
			return false
		}
		if !waitAny() {
			continue
		}
		enders = append(enders, i)
		waitStage(t, in.Log, held, "rejected")
		var lines []string
		for _, l := range logLines(t, in.Log) {
			if l["proposal_id"] == held {
				lines = append(lines, fmt.Sprintf("%v %v %v", l["stage"], l["reason"], l["message"]))
			}
		}
		want := "rejected timeout no approval by " + rec.Deadline.UTC().Format(time.RFC3339) + " (the deadline passed while no fulfiller held the proposal)"
		if len(lines) != 1 || lines[0] != want {
			t.Errorf("instance %d's lines of the lost call:\n%s\nwant\n%s", i, strings.Join(lines, "\n"), want)
		}
	}
	if len(enders) != 1 {
		t.Errorf("instances that ended the lost call: %v; want exactly one", enders)
	}
	for _, in := range others {
		if heldOn(in.instance, held) {
			t.Errorf("an instance still holds the lost call after its end")
		}
	}
	if n := runs.Load(); n != 0 {
		t.Errorf("the upstream ran the lost drop %d times; want never", n)
	}

	// A record of a gone instance queued to run (approved) is never
	// ended: resuming it would run its call. One awaiting approval, put
	// beside it, goes at the next sweep.
	queued, awaiting := *rec, *rec
	queued.ID, queued.Phase, queued.Owner, queued.Deadline = "lost-queued", lifecycle.Queued, "mcp-gone", time.Now().Add(-time.Minute)
	awaiting.ID, awaiting.Owner, awaiting.Deadline = "lost-awaiting", "mcp-gone", time.Now().Add(-time.Minute)
	for _, r := range []*lifecycle.Proposal{&queued, &awaiting} {
		if err := st.Put(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	putAt := time.Now()
	poll.Until(t, "the gone instance's record awaiting approval ended", func() bool {
		_, err := st.Get(ctx, awaiting.ID)
		return errors.Is(err, state.ErrNotFound)
	})
	t.Logf("the gone instance's record awaiting approval ended after %v", time.Since(putAt))
	// The sweep that ended it listed the queued one too (put first);
	// a few more pass before the look.
	time.Sleep(5 * sweep)
	if r, err := st.Get(ctx, queued.ID); err != nil || r.Owner != "mcp-gone" || r.Phase != lifecycle.Queued {
		t.Errorf("the gone instance's queued record after a sweep: %v", func() any {
			if err != nil {
				return err
			}
			return "owner " + r.Owner + ", phase " + string(r.Phase) + "; want it untouched"
		}())
	}
	if n := runs.Load(); n != 0 {
		t.Errorf("the upstream ran %d drops; want none", n)
	}
	if err := st.Delete(ctx, &queued); err != nil {
		t.Fatal(err)
	}

	// A retry now is a new call: a new proposal, put to alice again.
	b := others[0]
	c2 := connect(t, b.url, nil)
	retry := callAsync(c2.cs, "users")
	poll.Until(t, "a new proposal for the retry", func() bool {
		ps := b.srv.Engine().Pending()
		return len(ps) == 1 && ps[0].ID != held && ps[0].State == "awaiting_approval"
	})
	_ = retry // answered when the test's instances close
}
