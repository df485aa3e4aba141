package approver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/elicit/approver"
	"github.com/mewkit/fulfiller/internal/poll"
)

// recUI records the cards it is asked about and every event. It leaves a
// card open until it ends, unless answer says otherwise.
type recUI struct {
	answer func(*approver.Card) (approver.Answer, bool)

	mu     sync.Mutex
	asked  []*approver.Card
	events []approver.Event
	shown  chan *approver.Card
}

func newRecUI(answer func(*approver.Card) (approver.Answer, bool)) *recUI {
	return &recUI{answer: answer, shown: make(chan *approver.Card, 16)}
}

func (u *recUI) Ask(ctx context.Context, c *approver.Card) (approver.Answer, error) {
	u.mu.Lock()
	u.asked = append(u.asked, c)
	u.mu.Unlock()
	u.shown <- c
	if u.answer != nil {
		if a, ok := u.answer(c); ok {
			return a, nil
		}
	}
	<-ctx.Done()
	return approver.Answer{}, ctx.Err()
}

func (u *recUI) Notify(ev approver.Event) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.events = append(u.events, ev)
}

func (u *recUI) snapshot() []approver.Event {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]approver.Event(nil), u.events...)
}

// card waits until the UI is shown a card.
func (u *recUI) card(t *testing.T) *approver.Card {
	t.Helper()
	var c *approver.Card
	poll.Until(t, "a card", func() bool {
		select {
		case c = <-u.shown:
			return true
		default:
			return false
		}
	})
	return c
}

// event waits for the first event of kind and returns it.
func (u *recUI) event(t *testing.T, kind approver.EventKind) approver.Event {
	t.Helper()
	var ev approver.Event
	poll.Until(t, "a "+kind.String()+" event", func() bool {
		for _, e := range u.snapshot() {
			if e.Kind == kind {
				ev = e
				return true
			}
		}
		return false
	})
	return ev
}

// gated answers as UI does once go is closed.
type gated struct {
	go_ chan struct{}
	approver.UI
}

func (g gated) Ask(ctx context.Context, c *approver.Card) (approver.Answer, error) {
	select {
	case <-g.go_:
		return g.UI.Ask(ctx, c)
	case <-ctx.Done():
		return approver.Answer{}, ctx.Err()
	}
}

// A card that goes away says why, as data for every face: the cause read
// from the fulfiller's notifications/cancelled.
func TestCardEndCauses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		escalation string
		end        func(t *testing.T, w *world, id string)
		want       approver.End
		text       string
	}{
		{"withdrawn", oneApprover, func(t *testing.T, w *world, id string) {
			if err := w.prop.Withdraw(w.ctx, id, "no_longer_needed"); err != nil {
				t.Fatal(err)
			}
		}, approver.End{Cause: approver.CauseWithdrawn, Reason: "withdrawn"}, "withdrawn by the proposer"},
		// 3s: long enough for the card to reach alice on a loaded machine
		// (a card past its deadline is never shown).
		{"deadline", `{"approvers":["alice"],"timeout":"3s"}`, func(*testing.T, *world, string) {},
			approver.End{Cause: approver.CauseDeadline}, "the deadline passed"},
		{"operator", oneApprover, func(t *testing.T, w *world, id string) {
			if err := w.ful.Cancel(id, "ops"); err != nil {
				t.Fatal(err)
			}
		}, approver.End{Cause: approver.CauseCancelled, Reason: "cancelled"}, "cancelled by the operator"},
		// Who decided, and why, as the space showed bob's answer.
		{"another approver declined", `{"approvers":["alice","bob"]}`, func(_ *testing.T, w *world, _ string) { close(w.bobGo) },
			approver.End{Cause: approver.CauseDecided, Reason: "disagree", By: []approver.PeerAnswer{{Approver: "bob", Action: approver.PeerDeclined, Reason: "frozen"}}},
			"decided by another approver: not approved (bob declined: frozen)"},
		{"another approver approved", `{"approvers":["alice","bob"]}`, func(_ *testing.T, w *world, _ string) { close(w.bobGo) },
			approver.End{Cause: approver.CauseDecided, Reason: "approved", Approved: true, By: []approver.PeerAnswer{{Approver: "bob", Action: approver.PeerApproved, Reason: "frozen"}}},
			"decided by other approvers: approved (bob approved: frozen)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A world each, and the deadline case waits 3 s: side by side.
			t.Parallel()
			w := newWorld(t, tc.escalation, nil)
			if strings.Contains(tc.escalation, "bob") {
				// Bob is in the space before the proposal (a prompt sent
				// before a client subscribes is lost), and answers once
				// alice has her card.
				w.bobGo = make(chan struct{})
				bob := &approver.Auto{Approve: tc.want.Approved, Reason: "frozen"}
				w.approver("bob", gated{w.bobGo, bob}, approver.Options{})
			}
			ui := newRecUI(nil)
			w.approver("alice", ui, approver.Options{})
			id := w.propose("p-write")
			card := ui.card(t)
			tc.end(t, w, id)
			ev := ui.event(t, approver.EventEnded)
			got := ev.End
			if tc.want.Reason == "" {
				// The client's own clock or the fulfiller's cancel
				// ("timeout"), whichever is first: the same cause.
				got.Reason = ""
			}
			if ev.Card.RequestID != card.RequestID || !reflect.DeepEqual(got, tc.want) || ev.Fulfiller != "fulfiller" {
				t.Errorf("ended %+v of %s, want %+v of %s", ev.End, ev.Card.RequestID, tc.want, card.RequestID)
			}
			if got := ev.End.String(); got != tc.text {
				t.Errorf("said %q, want %q", got, tc.text)
			}
		})
	}
}

// Only the fulfiller that asked can take a card away: anyone in the space
// can send a notifications/cancelled naming it, and the gateway broadcasts
// it to the approver, but the card stays until the fulfiller's own
// cancellation ends it — with the fulfiller's reason, not the forger's.
func TestForgedCancelKeepsCard(t *testing.T) {
	t.Parallel()
	w := newWorld(t, oneApprover, nil)
	ui := newRecUI(nil)
	w.approver("alice", ui, approver.Options{})
	id := w.propose("p-write")
	card := ui.card(t)

	mallory := w.join("mallory", "fulfiller-token") // may send mcp/request
	forged := agent.Envelope{To: []string{"alice"}, Kind: agent.KindRequest, CorrelationID: agent.CorrelationIDs{card.RequestID},
		Payload: json.RawMessage(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + string(card.RPCID) + `,"reason":"cancelled"}}`)}
	if _, err := mallory.Send(w.ctx, forged); err != nil {
		t.Fatal(err)
	}
	w.find("the forged cancel", func(e agent.Envelope) bool { return e.From == "mallory" })
	// Envelopes reach alice in order: the withdrawal's cancel comes after
	// the forged one, so the first end she reports shows which counted.
	if err := w.prop.Withdraw(w.ctx, id, "no_longer_needed"); err != nil {
		t.Fatal(err)
	}
	ev := ui.event(t, approver.EventEnded)
	if ev.End.Cause != approver.CauseWithdrawn {
		t.Errorf("the card ended %+v, want by the fulfiller's withdrawal", ev.End)
	}
	var ended int
	for _, e := range ui.snapshot() {
		if e.Kind == approver.EventEnded {
			ended++
		}
	}
	if ended != 1 {
		t.Errorf("%d ended events, want 1", ended)
	}
}

// The fulfiller leaving ends its cards (an answer now would reach nobody)
// and says so; when it is back and asks again, the same card is shown
// again and can be answered.
func TestFulfillerLeavesAndComesBack(t *testing.T) {
	t.Parallel()
	w := newWorld(t, oneApprover, nil)
	var round int
	var mu sync.Mutex
	ui := newRecUI(func(*approver.Card) (approver.Answer, bool) {
		mu.Lock()
		defer mu.Unlock()
		round++
		return approver.Answer{Action: approval.ActionAccept, Approve: true}, round == 2
	})
	w.approver("alice", ui, approver.Options{})
	id := w.propose("p-write")
	first := ui.card(t)
	if n := w.srv.Drop("fulfiller"); n != 1 {
		t.Fatalf("dropped %d sockets of the fulfiller", n)
	}
	left := ui.event(t, approver.EventFulfillerLeft)
	ended := ui.event(t, approver.EventEnded)
	if ended.End.Cause != approver.CauseFulfillerLeft || ended.Card.RequestID != first.RequestID {
		t.Errorf("ended %+v of %s", ended.End, ended.Card.RequestID)
	}
	if left.Fulfiller != "fulfiller" {
		t.Errorf("left %+v", left)
	}
	ui.event(t, approver.EventFulfillerJoined)
	again := ui.card(t)
	if again.RequestID != first.RequestID {
		t.Errorf("shown %s again, want %s", again.RequestID, first.RequestID)
	}
	if o := w.outcome(id); !o.Fulfilled {
		t.Fatalf("outcome %+v", o)
	}
	out := ui.event(t, approver.EventOutcome)
	if !out.Outcome.Fulfilled || out.Outcome.Target != "fs" || out.Card.RequestID != first.RequestID {
		t.Errorf("outcome %+v", out.Outcome)
	}
	var order []string
	for _, e := range ui.snapshot() {
		order = append(order, e.Kind.String())
	}
	if got := strings.Join(order, " "); got != "fulfiller_left ended fulfiller_joined sent outcome" {
		t.Errorf("events %s", got)
	}
}

// After an approval the approver learns what became of the proposal: the
// fulfilment, or the policy's reject of the edited call with its message.
func TestApprovalOutcome(t *testing.T) {
	t.Parallel()
	t.Run("fulfilled", func(t *testing.T) {
		w := newWorld(t, oneApprover, nil)
		ui := newRecUI(func(*approver.Card) (approver.Answer, bool) {
			return approver.Answer{Action: approval.ActionAccept, Approve: true}, true
		})
		w.approver("alice", ui, approver.Options{})
		w.propose("p-write")
		ev := ui.event(t, approver.EventOutcome)
		if want := (approver.Outcome{Fulfilled: true, Target: "fs"}); ev.Outcome != want {
			t.Errorf("outcome %+v, want %+v", ev.Outcome, want)
		}
		if got := ev.Outcome.String(); got != "fulfilled: the call was sent to fs" {
			t.Errorf("said %q", got)
		}
	})
	t.Run("rejected by the policy after an edit", func(t *testing.T) {
		w := newWorld(t, oneApprover, nil)
		ui := newRecUI(func(*approver.Card) (approver.Answer, bool) {
			return approver.Answer{Action: approval.ActionAccept, Approve: true, Edits: []approver.Edit{{Name: "path", Value: json.RawMessage(`"/tmp/motd"`)}}}, true
		})
		w.approver("alice", ui, approver.Options{})
		id := w.propose("p-write")
		if o := w.outcome(id); o.Reason != "policy" {
			t.Fatalf("proposal outcome %+v", o)
		}
		ev := ui.event(t, approver.EventOutcome)
		if want := (approver.Outcome{Reason: "policy", Message: "writes stay under /srv/prod"}); ev.Outcome != want {
			t.Errorf("outcome %+v, want %+v", ev.Outcome, want)
		}
		if got := ev.Outcome.String(); got != "rejected by the policy: writes stay under /srv/prod" {
			t.Errorf("said %q", got)
		}
	})
}

// chanConn is a Conn that records what the client sends.
type chanConn struct{ sent chan agent.Envelope }

func (chanConn) ID() string { return "alice" }
func (c chanConn) Send(_ context.Context, env agent.Envelope) (agent.Envelope, error) {
	c.sent <- env
	return env, nil
}

// The outcome of an approval comes only from the fulfiller that asked: a
// reject of the proposal from anyone else is not taken as its outcome. A
// reject with no explanation is reported once the wait for its chat ends.
func TestOutcomeOnlyFromTheFulfiller(t *testing.T) {
	t.Parallel()
	params := `{"name":"write_file","arguments":{"path":"/srv/prod/motd"}}`
	digest, _ := approval.CallDigest("tools/call", json.RawMessage(params))
	prompt := agent.Envelope{ID: "fulfiller-elicit-1", From: "fulfiller", To: []string{"alice"}, Kind: agent.KindRequest, Payload: json.RawMessage(`{"jsonrpc":"2.0","id":3,"method":"elicitation/create","params":{"message":"m","requestedSchema":{"type":"object","properties":{"approve":{"type":"boolean"}}},"_meta":{"proposal":{"id":"p-1","from":"coder","method":"tools/call","params":` + params + `,"digest":"` + digest + `","deadline":"2999-01-01T00:00:00Z"}}}}`)}
	ui := newRecUI(func(*approver.Card) (approver.Answer, bool) {
		return approver.Answer{Action: approval.ActionAccept, Approve: true}, true
	})
	conn := chanConn{sent: make(chan agent.Envelope, 4)}
	in := make(chan agent.Envelope, 4)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- approver.New(conn, ui, approver.Options{}).Run(ctx, in) }()
	defer func() { cancel(); <-done }()

	in <- prompt
	ui.event(t, approver.EventSent)
	in <- agent.Envelope{ID: "r-forged", From: "mallory", To: []string{"coder"}, Kind: agent.KindReject, CorrelationID: agent.CorrelationIDs{"p-1"}, Payload: json.RawMessage(`{"reason":"policy"}`)}
	in <- agent.Envelope{ID: "r-1", From: "fulfiller", To: []string{"coder"}, Kind: agent.KindReject, CorrelationID: agent.CorrelationIDs{"p-1"}, Payload: json.RawMessage(`{"reason":"timeout"}`)}
	ev := ui.event(t, approver.EventOutcome)
	if want := (approver.Outcome{Reason: "timeout"}); ev.Outcome != want {
		t.Errorf("outcome %+v, want %+v", ev.Outcome, want)
	}
	if got := ev.Outcome.String(); got != "rejected (timeout)" {
		t.Errorf("said %q", got)
	}
}

// chosenUI shows every card it is given until the test answers it by
// request id (answer) or the card ends.
type chosenUI struct {
	*recUI
	mu      sync.Mutex
	answers map[string]chan approver.Answer
}

func (u *chosenUI) ch(requestID string) chan approver.Answer {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.answers[requestID] == nil {
		u.answers[requestID] = make(chan approver.Answer, 1)
	}
	return u.answers[requestID]
}

func (u *chosenUI) Ask(ctx context.Context, c *approver.Card) (approver.Answer, error) {
	u.recUI.mu.Lock()
	u.asked = append(u.asked, c)
	u.recUI.mu.Unlock()
	u.shown <- c
	select {
	case a := <-u.ch(c.RequestID):
		return a, nil
	case <-ctx.Done():
		return approver.Answer{}, ctx.Err()
	}
}

// With Options.Open above one (the inbox page), that many cards are shown
// at once and answered in any order; the rest wait in arrival order and
// take the place of a card that ends.
func TestOpenCardsSideBySide(t *testing.T) {
	t.Parallel()
	prompt := func(n int) agent.Envelope {
		params := fmt.Sprintf(`{"name":"write_file","arguments":{"path":"/srv/prod/%d"}}`, n)
		digest, _ := approval.CallDigest("tools/call", json.RawMessage(params))
		return agent.Envelope{ID: fmt.Sprintf("fulfiller-elicit-%d", n), From: "fulfiller", To: []string{"alice"}, Kind: agent.KindRequest,
			Payload: json.RawMessage(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"elicitation/create","params":{"message":"m","requestedSchema":{"type":"object","properties":{"approve":{"type":"boolean"}}},"_meta":{"proposal":{"id":"p-%d","from":"coder","method":"tools/call","params":%s,"digest":"%s","deadline":"2999-01-01T00:00:00Z"}}}}`, n, n, params, digest))}
	}
	ui := &chosenUI{recUI: newRecUI(nil), answers: map[string]chan approver.Answer{}}
	conn := chanConn{sent: make(chan agent.Envelope, 4)}
	in := make(chan agent.Envelope, 8)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- approver.New(conn, ui, approver.Options{Open: 2}).Run(ctx, in) }()
	defer func() { cancel(); <-done }()

	for n := 1; n <= 3; n++ {
		in <- prompt(n)
	}
	// Each open card is asked from a goroutine of its own: the two first
	// arrive at the UI in either order.
	first, second := ui.card(t), ui.card(t)
	if first.RequestID == "fulfiller-elicit-2" {
		first, second = second, first
	}
	if first.RequestID != "fulfiller-elicit-1" || second.RequestID != "fulfiller-elicit-2" {
		t.Fatalf("shown %s and %s, want the first two to arrive", first.RequestID, second.RequestID)
	}
	select {
	case c := <-ui.shown:
		t.Fatalf("a third card %s shown while two are open, want it to wait", c.RequestID)
	case <-time.After(100 * time.Millisecond):
	}

	// The second is answered before the first: its answer goes out alone.
	ui.ch(second.RequestID) <- approver.Answer{Action: approval.ActionAccept, Approve: true}
	sent := <-conn.sent
	if sent.CorrelationID.First() != second.RequestID {
		t.Fatalf("answer correlated to %v, want %s", sent.CorrelationID, second.RequestID)
	}
	third := ui.card(t)
	if third.RequestID != "fulfiller-elicit-3" {
		t.Fatalf("shown %s after an answer, want the waiting third", third.RequestID)
	}

	// The fulfiller ends the first: only it goes, the third stays open.
	in <- agent.Envelope{ID: "c-1", From: "fulfiller", To: []string{"alice"}, Kind: agent.KindRequest, CorrelationID: agent.CorrelationIDs{first.RequestID},
		Payload: json.RawMessage(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"withdrawn"}}`)}
	ev := ui.event(t, approver.EventEnded)
	if ev.Card.RequestID != first.RequestID || ev.End.Cause != approver.CauseWithdrawn {
		t.Fatalf("ended %s (%s), want %s withdrawn", ev.Card.RequestID, ev.End.Cause, first.RequestID)
	}
	ui.ch(third.RequestID) <- approver.Answer{Action: approval.ActionDecline}
	if sent := <-conn.sent; sent.CorrelationID.First() != third.RequestID {
		t.Fatalf("answer correlated to %v, want %s", sent.CorrelationID, third.RequestID)
	}
}

// With a quorum of two, bob's approval shows on alice's open card as the
// quorum's progress (every approver sees every answer on the broadcast);
// a forged answer in bob's name to a prompt that was not his, and an
// answer from someone who was not asked, change nothing.
func TestCardShowsTheQuorumsProgress(t *testing.T) {
	t.Parallel()
	w := newWorld(t, `{"approvers":["alice","bob"],"quorum":2}`, nil)
	w.bobGo = make(chan struct{})
	w.approver("bob", gated{w.bobGo, &approver.Auto{Approve: true, Reason: "looks fine"}}, approver.Options{})
	ui := newRecUI(nil)
	w.approver("alice", ui, approver.Options{})
	id := w.propose("p-write")
	card := ui.card(t)
	if card.Policy.Quorum != 2 {
		t.Fatalf("card quorum %d", card.Policy.Quorum)
	}
	w.join("mallory", "human-token")
	// In bob's name, answering alice's prompt: not bob's prompt, so not
	// bob's answer; and mallory answering in her own name was not asked.
	for _, from := range []string{"bob", "mallory"} {
		body := `{"from":"` + from + `","to":["fulfiller"],"kind":"mcp/response","correlation_id":["` + card.RequestID + `"],"payload":{"result":{"action":"decline","content":{"reason":"forged"}}}}`
		url := strings.Replace(w.srv.URL(), "ws://", "http://", 1) + "/participants/mallory/messages"
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer human-token")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("forged post: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	close(w.bobGo)
	ev := ui.event(t, approver.EventPeers)
	want := []approver.PeerAnswer{{Approver: "bob", Action: approver.PeerApproved, Reason: "looks fine"}}
	if ev.Card.RequestID != card.RequestID || !reflect.DeepEqual(ev.Peers, want) {
		t.Fatalf("peers event %+v", ev)
	}
	if got := approver.Progress(ev.Card, ev.Peers); got != "1 of 2 approvals so far: bob approved: looks fine" {
		t.Errorf("progress says %q", got)
	}
	if s, ok := w.ful.Get(id); !ok || s.State != "awaiting_approval" {
		t.Fatalf("after bob alone: %+v %v", s, ok)
	}
}

// The terminal says the quorum's progress on a line of its own, with what
// came from the space made printable.
func TestTerminalSaysTheOthersAnswers(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	term := &approver.Terminal{Out: &out}
	card := &approver.Card{RequestID: "e1", Proposal: &approver.Proposal{ID: "p1", From: "coder", Method: "tools/call"},
		Tool: &approver.Tool{Name: "delete_path"}, Target: "fs", Policy: approver.Policy{Approvers: []string{"alice", "bob", "carol"}, Quorum: 2}}
	term.Notify(approver.Event{Kind: approver.EventPeers, Card: card, Peers: []approver.PeerAnswer{{Approver: "bob", Action: approver.PeerApproved, Reason: "ok\x1b[2J"}}})
	if got, want := out.String(), "· others p1: coder → delete_path on fs — 1 of 2 approvals so far: bob approved: ok\\x1b[2J\n"; got != want {
		t.Errorf("terminal says %q, want %q", got, want)
	}
}
