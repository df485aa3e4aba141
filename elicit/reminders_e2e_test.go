package elicit_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/elicit/notify"
)

// tieredEscalation asks alice, reminds after 300ms and asks bob too after
// 600ms, within a 10s deadline.
const tieredEscalation = `{"approvers":["alice"],"message":"production writes need a human","timeout":"10s","reminders":["300ms"],"escalate_to":[{"after":"600ms","approvers":["bob"]}]}`

// hook is a webhook receiver that checks the signature as
// docs/operations.md tells receivers to and keeps the events it accepted,
// in order.
type hook struct {
	events chan notify.Event
	bad    chan string
}

func newHook(t *testing.T, w func(notify.Config) notify.Config) (*hook, *notify.Notifier) {
	t.Helper()
	const secret = "s3cret"
	h := &hook{events: make(chan notify.Event, 64), bad: make(chan string, 64)}
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write(body)
		want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
		var ev notify.Event
		if !hmac.Equal([]byte(r.Header.Get("X-Fulfiller-Signature")), []byte(want)) || json.Unmarshal(body, &ev) != nil || r.Header.Get("X-Fulfiller-Event") != string(ev.Type) {
			h.bad <- string(body)
			http.Error(rw, "bad signature", http.StatusUnauthorized)
			return
		}
		h.events <- ev
	}))
	t.Cleanup(srv.Close)
	tg, err := notify.ParseTarget(srv.URL, notify.Options{Secret: []byte(secret)})
	if err != nil {
		t.Fatal(err)
	}
	n := notify.New(w(notify.Config{Targets: []notify.Target{tg}, Drain: time.Second}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = n.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return h, n
}

// next is the next event the receiver accepted.
func (h *hook) next(t *testing.T) notify.Event {
	t.Helper()
	select {
	case ev := <-h.events:
		return ev
	case b := <-h.bad:
		t.Fatalf("a notification failed the signature check: %s", b)
	case <-time.After(10 * time.Second):
		t.Fatal("no notification")
	}
	return notify.Event{}
}

// none asserts the receiver got nothing more.
func (h *hook) none(t *testing.T) {
	t.Helper()
	select {
	case ev := <-h.events:
		t.Errorf("unexpected notification %+v", ev)
	case b := <-h.bad:
		t.Errorf("unexpected notification, badly signed: %s", b)
	default:
	}
}

// deadlineOf reads _meta.proposal.deadline of an elicitation.
func deadlineOf(t *testing.T, env agent.Envelope) time.Time {
	t.Helper()
	var p struct {
		Params struct {
			Meta struct {
				Proposal struct {
					Deadline time.Time `json:"deadline"`
				} `json:"proposal"`
			} `json:"_meta"`
		} `json:"params"`
	}
	if err := json.Unmarshal(env.Payload, &p); err != nil || p.Params.Meta.Proposal.Deadline.IsZero() {
		t.Fatalf("no deadline in %s (%v)", env.Payload, err)
	}
	return p.Params.Meta.Proposal.Deadline
}

// wantEvent is the notification for writeCall, its time aside.
func wantEvent(typ notify.Type, approvers []string, deadline time.Time) notify.Event {
	return notify.Event{Type: typ, Space: "dev", Proposal: "p-write", Proposer: "coder", Method: "tools/call", Tool: "write_file", Server: "fs",
		Digest: writeDigest[:12], Approvers: approvers, Quorum: 1, Deadline: deadline.UTC(), URL: "https://inbox.example/#proposal=p-write"}
}

func sameEvent(t *testing.T, got, want notify.Event) {
	t.Helper()
	got.Time = time.Time{}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("notification\n got %+v\nwant %+v", got, want)
	}
}

// A prompt still open at its reminder time is announced again once
// (prompt.reminder, to alice, who is still waited for); at the tier's
// time bob is asked too with a new elicitation whose deadline is alice's
// (prompt.escalated), his card listing both approvers; his approval
// counts toward the same quorum.
func TestE2EReminderAndTier(t *testing.T) {
	t.Parallel()
	h, n := newHook(t, func(c notify.Config) notify.Config {
		c.Space, c.InboxURL = "dev", "https://inbox.example/"
		return c
	})
	w := newWorld(t, worldOptions{escalation: tieredEscalation, observe: n.Observe})
	id := w.propose("p-write", writeCall)
	ea := w.ask("alice")
	deadline := deadlineOf(t, ea)
	started := deadline.Add(-10 * time.Second) // the deadline is the start plus the 10s timeout

	// Alice's card lists only her: bob is not an approver yet.
	exact(t, ea, `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["alice"],"kind":"mcp/request","payload":{"jsonrpc":"2.0","id":1,"method":"elicitation/create","params":{`+
		`"message":"coder wants to call write_file on fs with {\"path\":\"/srv/prod/motd\",\"content\":\"hi\"}: production writes need a human. Call digest 56dcae76b714.",`+
		`"requestedSchema":{"type":"object","properties":{"approve":{"type":"boolean","title":"Approve?"},"reason":{"type":"string","title":"Reason"}},"required":["approve"]},`+
		`"_meta":{"proposal":{"id":"p-write","from":"coder","method":"tools/call","params":{"name":"write_file","arguments":{"path":"/srv/prod/motd","content":"hi"}},"digest":"`+writeDigest+`","deadline":"*","revision":"*"},`+
		`"tool":{"name":"write_file","server":"fs","description":"Write a file, replacing it if it exists","annotations":{"destructiveHint":false,"readOnlyHint":false}},"target":"fs",`+
		`"policy":{"message":"production writes need a human","approvers":["alice"],"quorum":1}}}}}`)

	sameEvent(t, h.next(t), wantEvent(notify.PromptOpened, []string{"alice"}, deadline))
	rem := h.next(t)
	sameEvent(t, rem, wantEvent(notify.PromptReminder, []string{"alice"}, deadline))
	if d := rem.Time.Sub(started); d < 300*time.Millisecond || d > 5*time.Second {
		t.Errorf("reminder %s after the start, want at 300ms", d)
	}
	esc := h.next(t)
	sameEvent(t, esc, wantEvent(notify.PromptEscalated, []string{"bob"}, deadline))
	if d := esc.Time.Sub(started); d < 600*time.Millisecond || d > 5*time.Second {
		t.Errorf("escalated %s after the start, want at 600ms", d)
	}

	eb := w.ask("bob")
	if got := deadlineOf(t, eb); !got.Equal(deadline) {
		t.Errorf("bob's deadline %s, want alice's %s", got, deadline)
	}
	exact(t, eb, `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["bob"],"kind":"mcp/request","payload":{"jsonrpc":"2.0","id":1,"method":"elicitation/create","params":{`+
		`"message":"coder wants to call write_file on fs with {\"path\":\"/srv/prod/motd\",\"content\":\"hi\"}: production writes need a human. Call digest 56dcae76b714.",`+
		`"requestedSchema":{"type":"object","properties":{"approve":{"type":"boolean","title":"Approve?"},"reason":{"type":"string","title":"Reason"},"delegate_to":{"type":"string","title":"Delegate to","enum":["alice"]}},"required":["approve"]},`+
		`"_meta":{"proposal":{"id":"p-write","from":"coder","method":"tools/call","params":{"name":"write_file","arguments":{"path":"/srv/prod/motd","content":"hi"}},"digest":"`+writeDigest+`","deadline":"*","revision":"*"},`+
		`"tool":{"name":"write_file","server":"fs","description":"Write a file, replacing it if it exists","annotations":{"destructiveHint":false,"readOnlyHint":false}},"target":"fs",`+
		`"policy":{"message":"production writes need a human","approvers":["alice","bob"],"quorum":1}}}}}`)
	for _, ev := range w.eventsOf(elicit.EventAsked) {
		if ev.Approver == "bob" && ev.Time.Sub(started) < 600*time.Millisecond {
			t.Errorf("bob asked %s after the start, before his tier", ev.Time.Sub(started))
		}
	}

	w.answer("bob", eb, `{"action":"accept","content":{"approve":true}}`)
	if out := w.outcome(id); !out.Fulfilled {
		t.Fatalf("outcome %+v", out)
	}
	if by := w.approvedBy(id); !slices.Equal(by, []string{"bob"}) {
		t.Errorf("approved by %v", by)
	}
	exact(t, w.cancellation(ea), cancelled("alice", ea, "1", "approved"))
	end := wantEvent(notify.PromptEnded, []string{"alice", "bob"}, deadline)
	end.Outcome = "approved"
	sameEvent(t, h.next(t), end)
	h.none(t)
	if n := len(w.eventsOf(elicit.EventReminded)); n != 1 {
		t.Errorf("%d reminders, want exactly 1", n)
	}
	if got := len(w.elicitations()); got != 2 {
		t.Errorf("%d elicitations on the wire, want alice's and bob's", got)
	}
}

// earlyEscalation is tieredEscalation with its reminder at 1s and its
// tier at 1.5s: time enough to answer or withdraw before either, even on
// a loaded machine.
const earlyEscalation = `{"approvers":["alice"],"message":"production writes need a human","timeout":"10s","reminders":["1s"],"escalate_to":[{"after":"1500ms","approvers":["bob"]}]}`

// waitPast waits until the escalation's schedule is over, so that a
// reminder or a tier that should not come would have come.
func waitPast(t time.Time) {
	if d := time.Until(t); d > 0 {
		<-time.After(d)
	}
}

// A proposal answered before its reminder and tier gets neither: no
// prompt.reminder, no prompt.escalated, and bob is never asked.
func TestE2EAnsweredBeforeReminderGetsNone(t *testing.T) {
	t.Parallel()
	h, n := newHook(t, func(c notify.Config) notify.Config { c.Space, c.InboxURL = "dev", "https://inbox.example/"; return c })
	w := newWorld(t, worldOptions{escalation: earlyEscalation, observe: n.Observe})
	id := w.propose("p-write", writeCall)
	ea := w.ask("alice")
	deadline := deadlineOf(t, ea)
	w.answer("alice", ea, `{"action":"accept","content":{"approve":true}}`)
	if out := w.outcome(id); !out.Fulfilled {
		t.Fatalf("outcome %+v", out)
	}
	sameEvent(t, h.next(t), wantEvent(notify.PromptOpened, []string{"alice"}, deadline))
	end := wantEvent(notify.PromptEnded, []string{"alice"}, deadline)
	end.Outcome = "approved"
	sameEvent(t, h.next(t), end)
	if d := time.Until(deadline.Add(-10*time.Second + time.Second)); d <= 0 {
		t.Fatalf("answered only %s after the reminder time: the test cannot tell whether the reminder was stopped", -d)
	}
	waitPast(deadline.Add(-10*time.Second + 1800*time.Millisecond))
	w.marker() // everything the fulfiller would have sent by now is on the wire
	h.none(t)
	if got := len(w.eventsOf(elicit.EventReminded)) + len(w.eventsOf(elicit.EventEscalated)); got != 0 {
		t.Errorf("%d reminder or escalation events after the answer", got)
	}
	for _, e := range w.elicitations() {
		if e.To[0] == "bob" {
			t.Errorf("bob asked after the proposal was decided: %s", e.Raw)
		}
	}
}

// A withdrawn proposal stops its timers: its prompt is cancelled, and no
// reminder, no tier and no prompt to bob comes after.
func TestE2EWithdrawnStopsReminders(t *testing.T) {
	t.Parallel()
	h, n := newHook(t, func(c notify.Config) notify.Config { c.Space, c.InboxURL = "dev", "https://inbox.example/"; return c })
	w := newWorld(t, worldOptions{escalation: earlyEscalation, observe: n.Observe})
	id := w.propose("p-write", writeCall)
	ea := w.ask("alice")
	deadline := deadlineOf(t, ea)
	if err := w.prop.Withdraw(context.Background(), id, "no_longer_needed"); err != nil {
		t.Fatal(err)
	}
	exact(t, w.cancellation(ea), cancelled("alice", ea, "1", "withdrawn"))
	sameEvent(t, h.next(t), wantEvent(notify.PromptOpened, []string{"alice"}, deadline))
	end := wantEvent(notify.PromptEnded, []string{"alice"}, deadline)
	end.Outcome, end.Reason = "cancelled", "withdrawn"
	sameEvent(t, h.next(t), end)
	if d := time.Until(deadline.Add(-10*time.Second + time.Second)); d <= 0 {
		t.Fatalf("withdrawn only %s after the reminder time: the test cannot tell whether the reminder was stopped", -d)
	}
	waitPast(deadline.Add(-10*time.Second + 1800*time.Millisecond))
	w.marker()
	h.none(t)
	if got := len(w.eventsOf(elicit.EventReminded)) + len(w.eventsOf(elicit.EventEscalated)); got != 0 {
		t.Errorf("%d reminder or escalation events after the withdrawal", got)
	}
	if got := w.elicitations(); len(got) != 1 {
		t.Errorf("%d elicitations on the wire, want alice's alone", len(got))
	}
	if n := w.awaitingApproval(); n != 0 {
		t.Errorf("%d escalations still open", n)
	}
}

// The reminders and tiers are kept with the escalation's record: after
// kill -9 and a restart on the same DIR state store they count from when
// the escalation first asked, not from the restart. A tier whose time
// passed while the fulfiller was down is asked at once, with the
// unchanged deadline; a reminder whose time passed is not sent late.
func TestE2ETierSurvivesRestart(t *testing.T) {
	t.Parallel()
	// tieredEscalation's times, stretched: the crash must come before the
	// reminder, which 300ms did not leave room for on a loaded machine.
	const slowTiers = `{"approvers":["alice"],"message":"production writes need a human","timeout":"20s","reminders":["2s"],"escalate_to":[{"after":"3s","approvers":["bob"]}]}`
	w := newWorld(t, worldOptions{stateDir: t.TempDir(), escalation: slowTiers})
	id := w.propose("p-write", writeCall)
	ea := w.ask("alice")
	deadline := deadlineOf(t, ea)
	w.crashFulfiller()
	if len(w.eventsOf(elicit.EventReminded)) != 0 {
		t.Fatal("the crash came after the reminder: the test cannot tell what the restart does")
	}
	waitPast(deadline.Add(-20*time.Second + 3500*time.Millisecond)) // past the reminder and the tier
	w.startFulfiller()

	if again := w.ask("alice"); again.ID != ea.ID || string(again.Payload) != string(ea.Payload) {
		t.Errorf("alice asked again as %s %s", again.ID, again.Payload)
	}
	eb := w.ask("bob")
	if got := deadlineOf(t, eb); !got.Equal(deadline) {
		t.Errorf("bob's deadline %s, want alice's %s", got, deadline)
	}
	if !strings.Contains(string(eb.Payload), `"policy":{"message":"production writes need a human","approvers":["alice","bob"],"quorum":1}`) {
		t.Errorf("bob's prompt does not list both approvers: %s", eb.Payload)
	}
	w.answer("bob", eb, `{"action":"accept","content":{"approve":true}}`)
	if out := w.outcome(id); !out.Fulfilled {
		t.Fatalf("outcome %+v", out)
	}
	if n := len(w.eventsOf(elicit.EventReminded)); n != 0 {
		t.Errorf("%d reminders sent late after the restart", n)
	}
}

// A tier still to come can bring the quorum: when alice's client cannot
// show the prompt, the escalation waits for bob's tier instead of giving
// up, and bob's approval decides.
func TestE2ETierStillToComeKeepsTheEscalationOpen(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{escalation: tieredEscalation})
	id := w.propose("p-write", writeCall)
	ea := w.ask("alice")
	payload := `{"jsonrpc":"2.0","id":` + string(rpcID(t, ea)) + `,"error":{"code":-32601,"message":"elicitation not supported"}}`
	if _, err := w.humans["alice"].client.Send(context.Background(), agent.Envelope{To: []string{"fulfiller"}, Kind: agent.KindResponse,
		CorrelationID: agent.CorrelationIDs{ea.ID}, Payload: json.RawMessage(payload)}); err != nil {
		t.Fatal(err)
	}
	eb := w.ask("bob")
	w.answer("bob", eb, `{"action":"accept","content":{"approve":true}}`)
	if out := w.outcome(id); !out.Fulfilled {
		t.Fatalf("outcome %+v", out)
	}
	if by := w.approvedBy(id); !slices.Equal(by, []string{"bob"}) {
		t.Errorf("approved by %v", by)
	}
}
