package elicit_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/elicit/notify"
	"github.com/mewkit/fulfiller/internal/poll"
)

// A webhook receiver that never answers delays nothing: the proposal is
// asked, approved and fulfilled while every notification hangs.
func TestE2ENotifyHangingReceiverDelaysNothing(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	hits := make(chan notify.Event, 16)
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev notify.Event
		_ = json.NewDecoder(r.Body).Decode(&ev)
		hits <- ev
		<-release
	}))
	t.Cleanup(hang.Close)
	tg, err := notify.ParseTarget(hang.URL, notify.Options{Secret: []byte("k")})
	if err != nil {
		t.Fatal(err)
	}
	n := notify.New(notify.Config{Targets: []notify.Target{tg}, Timeout: time.Hour, Drain: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = n.Run(ctx) }()
	t.Cleanup(func() { close(release); cancel(); <-done })

	w := newWorld(t, worldOptions{observe: n.Observe})
	id := w.propose("p-write", writeCall)
	ea := w.ask("alice")
	w.ask("bob")
	if ev := <-hits; ev.Type != notify.PromptOpened || ev.Proposal != id { // in flight, and hanging
		t.Fatalf("first notification %+v", ev)
	}
	start := time.Now()
	w.answer("alice", ea, `{"action":"accept","content":{"approve":true}}`)
	if out := w.outcome(id); !out.Fulfilled {
		t.Fatalf("outcome %+v", out)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("approved to fulfilled took %s", d)
	}
	// The escalation's end was observed, naming who was asked.
	poll.Until(t, "the ended event", func() bool { return len(w.eventsOf(elicit.EventEnded)) == 1 })
	op, end := w.eventsOf(elicit.EventOpened)[0], w.eventsOf(elicit.EventEnded)[0]
	if p := op.Prompt; p == nil || p.Proposer != "coder" || p.Tool != "write_file" || p.Target != "fs" || p.Digest != writeDigest ||
		!slices.Equal(p.Asked, []string{"alice", "bob"}) || p.Quorum != 1 || p.Arguments != nil || p.Deadline.IsZero() {
		t.Errorf("opened %+v", op.Prompt)
	}
	if end.Outcome != elicit.OutcomeApproved || end.ProposalID != id {
		t.Errorf("ended %+v", end)
	}
}

// With "notify_arguments": true the escalation's events carry the call's
// arguments; without it (the test above) they do not.
func TestE2ENotifyArgumentsWhenTheDecisionSaysSo(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{escalation: `{"approvers":["alice","bob"],"notify_arguments":true}`})
	id := w.propose("p-write", writeCall)
	w.ask("alice")
	eb := w.ask("bob")
	w.answer("bob", eb, `{"action":"decline"}`)
	if out := w.outcome(id); !out.Rejected {
		t.Fatalf("outcome %+v", out)
	}
	poll.Until(t, "the ended event", func() bool { return len(w.eventsOf(elicit.EventEnded)) == 1 })
	op, end := w.eventsOf(elicit.EventOpened)[0], w.eventsOf(elicit.EventEnded)[0]
	if string(op.Prompt.Arguments) != `{"path":"/srv/prod/motd","content":"hi"}` {
		t.Errorf("arguments %s", op.Prompt.Arguments)
	}
	if end.Outcome != "disagree" {
		t.Errorf("ended %+v", end)
	}
}

// A notification shows the arguments the tool owner will read, not a
// decoy under a key that differs from "arguments" only in case.
func TestE2ENotifiedArgumentsAreTheOnesThatRun(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{escalation: `{"approvers":["alice"],"notify_arguments":true}`})
	w.propose("p-decoy", `{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/srv/prod/motd","content":"pwned"},"Arguments":{"path":"/srv/prod/notes.txt","content":"hi"}}}`)
	w.ask("alice")
	poll.Until(t, "the opened event", func() bool { return len(w.eventsOf(elicit.EventOpened)) == 1 })
	if got := string(w.eventsOf(elicit.EventOpened)[0].Prompt.Arguments); got != `{"path":"/srv/prod/motd","content":"pwned"}` {
		t.Errorf("notified arguments %s", got)
	}
}
