package outbox_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/state"
	"github.com/mewkit/fulfiller/internal/outbox"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/space"
	"github.com/mewkit/fulfiller/internal/spacetest"
)

func openDir(t *testing.T, ctx context.Context, dir, member string) *state.Store {
	t.Helper()
	s, err := state.Open(ctx, state.Config{Mode: state.Mode{Kind: state.Dir, Dir: dir}, Space: "space-1", Member: member})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func reject(id, proposal string) agent.Envelope {
	env := agent.Envelope{ID: id, To: []string{"coder"}, Kind: agent.KindReject, CorrelationID: agent.CorrelationIDs{proposal},
		Payload: json.RawMessage(`{"reason":"timeout"}`)}
	agent.Stamp(&env, "fulfiller", time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC))
	return env
}

func outboxIDs(t *testing.T, ctx context.Context, s *state.Store) []string {
	t.Helper()
	as, err := s.Outbox(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(as))
	for i, a := range as {
		ids[i] = a.ProposalID
	}
	return ids
}

// TestAnswersSurviveAStoreReopen: an answer queued while the link was down
// is in the DIR store; after the store is closed and opened again (a
// restart), Restore gives back exactly that envelope, same id and bytes,
// and Done removes it. A cancellation queued beside it is not kept (safe
// to lose); an answer older than the proposal may wait is dropped from
// the store instead of sent.
func TestAnswersSurviveAStoreReopen(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "state")

	s1 := openDir(t, ctx, dir, "fulfiller")
	d1 := outbox.New(s1, 16, nil)
	ans := reject("fulfiller-r1", "p-1")
	cancelled := agent.Envelope{ID: "fulfiller-c1", To: []string{"fs"}, Kind: agent.KindRequest, CorrelationID: agent.CorrelationIDs{"p-2"},
		Payload: json.RawMessage(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`)}
	d1.Put(ans)
	d1.Put(cancelled)
	if got := d1.Len(); got != 2 {
		t.Fatalf("Len %d, want 2", got)
	}
	if got := outboxIDs(t, ctx, s1); len(got) != 1 || got[0] != "p-1" {
		t.Fatalf("store outbox %v, want [p-1]", got)
	}
	// Taken and put back (a flush whose write failed): still one record.
	envs := d1.Take()
	for _, e := range envs {
		d1.Put(e)
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}

	s2 := openDir(t, ctx, dir, "fulfiller")
	defer s2.Close()
	d2 := outbox.New(s2, 16, nil)
	restored, dropped, err := d2.Restore(ctx, time.Hour)
	if err != nil || restored != 1 || dropped != 0 {
		t.Fatalf("Restore: %d restored, %d dropped, %v; want 1, 0", restored, dropped, err)
	}
	got := d2.Take()
	want, _ := agent.Encode(ans)
	if len(got) != 1 || got[0].ID != ans.ID || string(got[0].Raw) != string(want) {
		t.Fatalf("restored %+v, want the answer %s", got, want)
	}
	d2.Done(got[0])
	if ids := outboxIDs(t, ctx, s2); len(ids) != 0 {
		t.Fatalf("store outbox after Done: %v", ids)
	}

	// An answer older than maxAge no longer matters: removed, not sent.
	d2.Put(reject("fulfiller-r3", "p-3"))
	d3 := outbox.New(s2, 16, nil)
	time.Sleep(time.Millisecond)
	restored, dropped, err = d3.Restore(ctx, time.Nanosecond)
	if err != nil || restored != 0 || dropped != 1 || d3.Len() != 0 {
		t.Fatalf("Restore of a stale answer: %d restored, %d dropped, len %d, %v", restored, dropped, d3.Len(), err)
	}
	if ids := outboxIDs(t, ctx, s2); len(ids) != 0 {
		t.Fatalf("stale answer left in the store: %v", ids)
	}
}

// TestRestoredAnswerReachesTheSpace: an agent.Client given a restored
// outbox sends the answer on its first session, with the envelope id it
// had before the restart, and the store forgets it once written.
func TestRestoredAnswerReachesTheSpace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "state")
	s1 := openDir(t, ctx, dir, "fulfiller")
	d1 := outbox.New(s1, 16, nil)
	ans := reject("fulfiller-r1", "p-1")
	d1.Put(ans)
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}

	srv, err := space.New(space.Config{Tokens: map[string][]agent.Capability{
		"fulfiller-token": {{Kind: "mcp/*"}},
		"coder-token":     {{Kind: "mcp/proposal"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	wire := spacetest.RecordWire(t, srv)
	spacetest.Join(t, ctx, srv, "coder", "coder-token")

	s2 := openDir(t, ctx, dir, "fulfiller")
	defer s2.Close()
	d2 := outbox.New(s2, 16, nil)
	if n, _, err := d2.Restore(ctx, time.Hour); err != nil || n != 1 {
		t.Fatalf("Restore: %d, %v", n, err)
	}
	spacetest.JoinWith(t, ctx, srv, agent.Config{ID: "fulfiller", Token: "fulfiller-token", Outbox: d2})
	got := wire.WaitFor(t, "the restored reject", func(e agent.Envelope) bool { return e.Kind == agent.KindReject })
	if got.ID != ans.ID || got.From != "fulfiller" || got.CorrelationID.First() != "p-1" || string(got.Payload) != `{"reason":"timeout"}` {
		t.Fatalf("on the wire: %s", got.Raw)
	}
	poll.Until(t, "the store forgets the sent answer", func() bool { return len(outboxIDs(t, ctx, s2)) == 0 })
}
