package approver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/elicit/approver"
	"github.com/mewkit/fulfiller/internal/poll"
)

// holdUI shows each card until the test answers it (release) or it ends,
// and records the cards and events as recUI does.
type holdUI struct {
	*recUI
	release chan approver.Answer
}

func newHoldUI() *holdUI {
	return &holdUI{recUI: newRecUI(nil), release: make(chan approver.Answer)}
}

func (u *holdUI) Ask(ctx context.Context, c *approver.Card) (approver.Answer, error) {
	u.mu.Lock()
	u.asked = append(u.asked, c)
	u.mu.Unlock()
	u.shown <- c
	select {
	case a := <-u.release:
		return a, nil
	case <-ctx.Done():
		return approver.Answer{}, ctx.Err()
	}
}

func (u *holdUI) askedIDs() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var ids []string
	for _, c := range u.asked {
		ids = append(ids, c.RequestID)
	}
	return ids
}

var approve = approver.Answer{Action: approval.ActionAccept, Approve: true}

// groupPrompt is an elicitation to alice from member from, with envelope
// id id, about proposal proposal writing path.
func groupPrompt(from, id, proposal, path string) agent.Envelope {
	env := promptEnv(id, path)
	env.From = from
	env.Payload = bytes.Replace(env.Payload, []byte(`"id":"p"`), []byte(`"id":"`+proposal+`"`), 1)
	return env
}

// cancelOf is member from's notifications/cancelled of prompt (its
// JSON-RPC id, as promptEnv gave it) with reason.
func cancelOf(from string, prompt agent.Envelope, reason string) agent.Envelope {
	return agent.Envelope{From: from, To: []string{"alice"}, Kind: agent.KindRequest, CorrelationID: agent.CorrelationIDs{prompt.ID},
		Payload: json.RawMessage(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + promptRPCID(prompt.ID) + `,"reason":"` + reason + `"}}`)}
}

// runGroupApprover runs a Client for the group ful-a, ful-b with ui until
// the test ends.
func runGroupApprover(t *testing.T, ui approver.UI) (*recordingConn, chan<- agent.Envelope) {
	t.Helper()
	conn := &recordingConn{}
	c := approver.New(conn, ui, approver.Options{Fulfillers: []string{"ful-a", "ful-b"}})
	in := make(chan agent.Envelope)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx, in) }()
	t.Cleanup(func() { cancel(); <-done })
	return conn, in
}

// answers returns the answers the client sent, as "to:correlation".
func (c *recordingConn) answers() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, e := range c.sent {
		if e.Kind == agent.KindResponse {
			out = append(out, e.To[0]+":"+e.CorrelationID.First())
		}
	}
	return out
}

// Prompts from every listed member of a group are shown, each answered to
// the member that asked; a prompt from a participant not in the list is
// not shown, though the gateway delivers it like any other.
func TestGroupPromptsFromEveryMemberShown(t *testing.T) {
	t.Parallel()
	ui := newHoldUI()
	conn, in := runGroupApprover(t, ui)

	in <- groupPrompt("mallory", "el-m", "p-m", "/m")
	in <- groupPrompt("ful-a", "el-a", "p-a", "/a")
	in <- groupPrompt("ful-b", "el-b", "p-b", "/b")
	for range 2 {
		ui.card(t)
		ui.release <- approve
	}
	poll.Until(t, "both answers", func() bool { return conn.sentCount() == 2 })
	if got, want := conn.answers(), []string{"ful-a:el-a", "ful-b:el-b"}; !slices.Equal(got, want) {
		t.Errorf("answers %v, want %v", got, want)
	}
	if got := ui.askedIDs(); !slices.Equal(got, []string{"el-a", "el-b"}) {
		t.Errorf("shown %v, want el-a and el-b only", got)
	}
	var sent []string
	for _, e := range ui.snapshot() {
		if e.Kind == approver.EventSent {
			sent = append(sent, e.Fulfiller)
		}
	}
	if !slices.Equal(sent, []string{"ful-a", "ful-b"}) {
		t.Errorf("sent events name %v", sent)
	}
}

// A member adopts the open prompt of a member presumed gone and asks it
// again from itself, same envelope id and bytes: the person still sees one
// card, and the answer goes to the adopter. Already answered, the recorded
// answer (the same signed bytes) goes to the adopter.
func TestGroupAdoptedPromptIsOneCard(t *testing.T) {
	t.Parallel()
	t.Run("open", func(t *testing.T) {
		ui := newHoldUI()
		conn, in := runGroupApprover(t, ui)
		first := groupPrompt("ful-a", "el-1", "p-1", "/x")
		in <- first
		ui.card(t)
		adopted := first
		adopted.From = "ful-b"
		in <- adopted
		ui.release <- approve
		poll.Until(t, "the answer", func() bool { return conn.sentCount() == 1 })
		if got := conn.answers(); !slices.Equal(got, []string{"ful-b:el-1"}) {
			t.Errorf("answers %v, want one to the adopter ful-b", got)
		}
		if got := ui.askedIDs(); len(got) != 1 {
			t.Errorf("shown %v, want one card", got)
		}
		if ev := ui.event(t, approver.EventSent); ev.Fulfiller != "ful-b" || ev.Card.From != "ful-b" {
			t.Errorf("sent event names %q, card from %q; want ful-b", ev.Fulfiller, ev.Card.From)
		}
	})
	t.Run("queued", func(t *testing.T) {
		ui := newHoldUI()
		conn, in := runGroupApprover(t, ui)
		in <- groupPrompt("ful-a", "el-0", "p-0", "/0")
		ui.card(t)
		first := groupPrompt("ful-a", "el-1", "p-1", "/x")
		in <- first
		adopted := first
		adopted.From = "ful-b"
		in <- adopted
		ui.release <- approve
		ui.card(t)
		ui.release <- approve
		poll.Until(t, "both answers", func() bool { return conn.sentCount() == 2 })
		if got := conn.answers(); !slices.Equal(got, []string{"ful-a:el-0", "ful-b:el-1"}) {
			t.Errorf("answers %v", got)
		}
		if got := ui.askedIDs(); len(got) != 2 {
			t.Errorf("shown %v, want two cards", got)
		}
	})
	t.Run("answered", func(t *testing.T) {
		ui := newHoldUI()
		conn, in := runGroupApprover(t, ui)
		first := groupPrompt("ful-a", "el-1", "p-1", "/x")
		in <- first
		ui.card(t)
		ui.release <- approve
		poll.Until(t, "the answer", func() bool { return conn.sentCount() == 1 })
		adopted := first
		adopted.From = "ful-b"
		in <- adopted
		poll.Until(t, "the answer again", func() bool { return conn.sentCount() == 2 })
		if got := conn.answers(); !slices.Equal(got, []string{"ful-a:el-1", "ful-b:el-1"}) {
			t.Errorf("answers %v", got)
		}
		conn.mu.Lock()
		a, b := conn.sent[0], conn.sent[1]
		conn.mu.Unlock()
		if !bytes.Equal(a.Payload, b.Payload) {
			t.Errorf("the adopter got %s, want the recorded answer %s", b.Payload, a.Payload)
		}
		if got := ui.askedIDs(); len(got) != 1 {
			t.Errorf("shown %v, want one card", got)
		}
	})
	t.Run("after the asker left", func(t *testing.T) {
		// The usual path: the gateway says ful-a left, its card ends; ful-b
		// adopts it once the lease lapsed and asks it again.
		ui := newHoldUI()
		conn, in := runGroupApprover(t, ui)
		first := groupPrompt("ful-a", "el-1", "p-1", "/x")
		in <- first
		ui.card(t)
		in <- agent.Envelope{From: agent.GatewayID, Kind: agent.KindPresence, Payload: agent.MustPayload(agent.PresencePayload{Event: agent.PresenceLeave, Participant: agent.Participant{ID: "ful-a"}})}
		ended := ui.event(t, approver.EventEnded)
		if ended.End.Cause != approver.CauseFulfillerLeft || ended.Fulfiller != "ful-a" {
			t.Errorf("ended %+v by %q", ended.End, ended.Fulfiller)
		}
		adopted := first
		adopted.From = "ful-b"
		in <- adopted
		if again := ui.card(t); again.RequestID != "el-1" || again.From != "ful-b" {
			t.Errorf("shown %s from %s, want el-1 from ful-b", again.RequestID, again.From)
		}
		ui.release <- approve
		poll.Until(t, "the answer", func() bool { return conn.sentCount() == 1 })
		if got := conn.answers(); !slices.Equal(got, []string{"ful-b:el-1"}) {
			t.Errorf("answers %v", got)
		}
	})
}

// A member that adopts a proposal under a new elicitation id replaces the
// older card about the same call: shown, it ends (saying why) and the new
// one is shown; queued, the new one takes its place. A prompt about another
// call under the same proposal id replaces nothing.
func TestGroupReaskUnderNewIDReplacesCard(t *testing.T) {
	t.Parallel()
	t.Run("shown", func(t *testing.T) {
		ui := newHoldUI()
		conn, in := runGroupApprover(t, ui)
		in <- groupPrompt("ful-a", "el-a", "p-1", "/x")
		ui.card(t)
		in <- groupPrompt("ful-b", "el-b", "p-1", "/x")
		ended := ui.event(t, approver.EventEnded)
		if ended.Card.RequestID != "el-a" || ended.End.Cause != approver.CauseReasked {
			t.Errorf("ended %s: %+v", ended.Card.RequestID, ended.End)
		}
		if got := ended.End.String(); got != "asked again by another fulfiller of the group; the new card follows" {
			t.Errorf("said %q", got)
		}
		if c := ui.card(t); c.RequestID != "el-b" {
			t.Fatalf("shown %s, want el-b", c.RequestID)
		}
		ui.release <- approve
		poll.Until(t, "the answer", func() bool { return conn.sentCount() == 1 })
		if got := conn.answers(); !slices.Equal(got, []string{"ful-b:el-b"}) {
			t.Errorf("answers %v", got)
		}
	})
	t.Run("queued", func(t *testing.T) {
		ui := newHoldUI()
		conn, in := runGroupApprover(t, ui)
		in <- groupPrompt("ful-a", "el-0", "p-0", "/0")
		ui.card(t)
		in <- groupPrompt("ful-a", "el-a", "p-1", "/x")
		in <- groupPrompt("ful-b", "el-b", "p-1", "/x")
		in <- groupPrompt("ful-b", "el-c", "p-1", "/other") // another call: its own card
		ui.release <- approve
		ui.card(t)
		ui.release <- approve
		ui.card(t)
		ui.release <- approve
		poll.Until(t, "three answers", func() bool { return conn.sentCount() == 3 })
		if got, want := ui.askedIDs(), []string{"el-0", "el-b", "el-c"}; !slices.Equal(got, want) {
			t.Errorf("shown %v, want %v", got, want)
		}
		if got, want := conn.answers(), []string{"ful-a:el-0", "ful-b:el-b", "ful-b:el-c"}; !slices.Equal(got, want) {
			t.Errorf("answers %v, want %v", got, want)
		}
	})
}

// Any listed member may end a card (the group shares its pending work),
// with its reason; a participant not listed may not, even naming the card
// and its JSON-RPC id exactly.
func TestGroupCancelFromAnyListedMember(t *testing.T) {
	t.Parallel()
	ui := newHoldUI()
	_, in := runGroupApprover(t, ui)
	prompt := groupPrompt("ful-a", "el-1", "p-1", "/x")
	in <- prompt
	ui.card(t)
	in <- cancelOf("mallory", prompt, "cancelled")
	in <- cancelOf("ful-b", prompt, "withdrawn")
	ev := ui.event(t, approver.EventEnded)
	if ev.End.Cause != approver.CauseWithdrawn || ev.Card.RequestID != "el-1" {
		t.Errorf("ended %s %+v, want el-1 withdrawn (ful-b's cancel, not mallory's)", ev.Card.RequestID, ev.End)
	}
}

// After an approval the outcome may come from any member (the one that
// received the answer, or one that adopted the proposal), not from a
// participant outside the group.
func TestGroupOutcomeFromAnyMember(t *testing.T) {
	t.Parallel()
	ui := newHoldUI()
	_, in := runGroupApprover(t, ui)
	in <- groupPrompt("ful-a", "el-1", "p", "/x")
	ui.card(t)
	ui.release <- approve
	ui.event(t, approver.EventSent)
	call := json.RawMessage(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/x"}}}`)
	in <- agent.Envelope{ID: "f-m", From: "mallory", To: []string{"evil"}, Kind: agent.KindRequest, CorrelationID: agent.CorrelationIDs{"p"}, Payload: call}
	in <- agent.Envelope{ID: "f-b", From: "ful-b", To: []string{"fs"}, Kind: agent.KindRequest, CorrelationID: agent.CorrelationIDs{"p"}, Payload: call}
	ev := ui.event(t, approver.EventOutcome)
	if want := (approver.Outcome{Fulfilled: true, Target: "fs"}); ev.Outcome != want || ev.Fulfiller != "ful-b" {
		t.Errorf("outcome %+v from %q, want %+v from ful-b", ev.Outcome, ev.Fulfiller, want)
	}
}

// With a group, the client says at the start which members are not in the
// space, one event each.
func TestGroupMembersAbsentAtStart(t *testing.T) {
	t.Parallel()
	ui := newRecUI(nil)
	in := make(chan agent.Envelope)
	close(in)
	if err := approver.New(absentConn{}, ui, approver.Options{Fulfillers: []string{"ful-a", "ful-b"}}).Run(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	var absent []string
	for _, e := range ui.snapshot() {
		if e.Kind == approver.EventFulfillerAbsent {
			absent = append(absent, e.Fulfiller)
		}
	}
	if !slices.Equal(absent, []string{"ful-a", "ful-b"}) {
		t.Errorf("absent %v", absent)
	}
}
