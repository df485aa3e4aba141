package approver_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/elicit/approver"
	"github.com/mewkit/fulfiller/internal/poll"
)

// gatedUI approves every card once the test lets it, and counts what the
// person was shown.
type gatedUI struct {
	release chan struct{}
	mu      sync.Mutex
	asked   int
	sent    []error
}

func (u *gatedUI) Ask(ctx context.Context, c *approver.Card) (approver.Answer, error) {
	u.mu.Lock()
	u.asked++
	u.mu.Unlock()
	select {
	case <-u.release:
		return approver.Answer{Action: approval.ActionAccept, Approve: true, Reason: "ok"}, nil
	case <-ctx.Done():
		return approver.Answer{}, ctx.Err()
	}
}

func (u *gatedUI) Notify(ev approver.Event) {
	if ev.Kind != approver.EventSent {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.sent = append(u.sent, ev.Err)
}

func (u *gatedUI) counts() (asked int, sent []error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.asked, append([]error(nil), u.sent...)
}

// fulfilledOnWire waits for the fulfilment request of proposal id and the
// tool owner's response to it.
func (w *world) fulfilledOnWire(id string) {
	w.t.Helper()
	req := w.find("the fulfilment request", func(e agent.Envelope) bool {
		return e.From == "fulfiller" && e.Kind == agent.KindRequest && e.CorrelationID.First() == id
	})
	w.find("the tool's response", func(e agent.Envelope) bool {
		return e.Kind == agent.KindResponse && e.From == "fs" && e.CorrelationID.First() == req.ID
	})
}

// Alice's signed approval is lost on the way: it reaches the gateway
// while the gateway hangs, and then her link dies with it unread. When she
// is back the fulfiller asks her the same question again; her client
// recognises it and sends the recorded answer (the same signed bytes)
// instead of asking her twice, and the proposal is fulfilled once.
func TestFaultLostAnswerIsSentAgain(t *testing.T) {
	t.Parallel()
	pub, priv, _ := ed25519.GenerateKey(nil)
	w := newWorld(t, `{"approvers":["alice"]}`, approval.Keys{"alice": pub})
	ui := &gatedUI{release: make(chan struct{})}
	w.approver("alice", ui, approver.Options{Key: priv})
	id := w.propose("p-write")
	prompt := w.find("the prompt", func(e agent.Envelope) bool {
		return e.From == "fulfiller" && strings.Contains(string(e.Payload), `"method":"elicitation/create"`)
	})
	poll.Until(t, "alice to be shown the card", func() bool { asked, _ := ui.counts(); return asked == 1 })

	w.srv.SetStalled(true)
	close(ui.release)
	poll.Until(t, "alice's answer to be written", func() bool { _, sent := ui.counts(); return len(sent) == 1 })
	if _, sent := ui.counts(); sent[0] != nil {
		t.Fatalf("answer not sent: %v", sent[0])
	}
	if n := w.srv.Drop("alice"); n != 1 { // her answer dies unread with her link
		t.Fatalf("dropped %d sockets of alice", n)
	}
	w.srv.SetStalled(false)

	// The proposer may have been away when its answer went by (nothing is
	// replayed to it), so the outcome is read from the wire.
	w.fulfilledOnWire(id)
	if asked, _ := ui.counts(); asked != 1 {
		t.Errorf("alice was shown the card %d times, want once", asked)
	}
	var prompts, answers, fulfilments []agent.Envelope
	for _, e := range w.wire.Envelopes() {
		switch {
		case e.From == "fulfiller" && strings.Contains(string(e.Payload), `"method":"elicitation/create"`):
			prompts = append(prompts, e)
		case e.From == "alice" && e.Kind == agent.KindResponse && e.CorrelationID.First() == prompt.ID:
			answers = append(answers, e)
		case e.From == "fulfiller" && e.Kind == agent.KindRequest && e.CorrelationID.First() == id:
			fulfilments = append(fulfilments, e)
		}
	}
	if len(prompts) < 2 {
		t.Fatalf("%d prompts on the wire, want the first and at least one asked again", len(prompts))
	}
	for _, p := range prompts {
		if p.ID != prompt.ID || !bytes.Equal(p.Payload, prompt.Payload) {
			t.Errorf("prompt %s %s is not the first one again", p.ID, p.Payload)
		}
	}
	if len(answers) == 0 {
		t.Fatal("no answer from alice on the wire")
	}
	for _, a := range answers {
		if a.CorrelationID.First() != prompt.ID || !bytes.Equal(a.Payload, answers[0].Payload) || !strings.Contains(string(a.Payload), `"signature":"`) {
			t.Errorf("answer %s %s is not the recorded signed answer to %s", a.CorrelationID, a.Payload, prompt.ID)
		}
	}
	if len(fulfilments) != 1 {
		t.Fatalf("%d fulfilment requests, want exactly one", len(fulfilments))
	}
	if got, _ := w.files.Read("/srv/prod/motd"); got != "hi" {
		t.Errorf("file holds %q after the approved write", got)
	}
}

// The approver client shows a question once: the same prompt, asked again
// after her link dropped while the card is still open, is not a second
// card.
func TestResentPromptShownOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t, `{"approvers":["alice"]}`, nil)
	ui := &gatedUI{release: make(chan struct{})}
	w.approver("alice", ui, approver.Options{})
	id := w.propose("p-write")
	w.find("the prompt", func(e agent.Envelope) bool {
		return e.From == "fulfiller" && strings.Contains(string(e.Payload), `"method":"elicitation/create"`)
	})
	poll.Until(t, "alice to be shown the card", func() bool { asked, _ := ui.counts(); return asked == 1 })
	// Counted from the drop: the prompt may have gone out twice already,
	// when the fulfiller heard alice join only after it asked her.
	asked := func() int {
		n := 0
		for _, e := range w.wire.Envelopes() {
			if e.From == "fulfiller" && strings.Contains(string(e.Payload), `"method":"elicitation/create"`) {
				n++
			}
		}
		return n
	}
	before := asked()
	w.srv.Drop("alice")
	poll.Until(t, "the prompt asked again", func() bool { return asked() > before })
	close(ui.release)
	w.fulfilledOnWire(id)
	poll.Until(t, "the UI to hear the answer was sent", func() bool { _, sent := ui.counts(); return len(sent) > 0 })
	if asked, sent := ui.counts(); asked != 1 || len(sent) != 1 {
		t.Errorf("shown %d times, answered %d times; want once each", asked, len(sent))
	}
}

// recordingConn is a Conn that records what the client sends.
type recordingConn struct {
	mu   sync.Mutex
	sent []agent.Envelope
}

func (c *recordingConn) ID() string { return "alice" }

func (c *recordingConn) Send(_ context.Context, env agent.Envelope) (agent.Envelope, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	agent.Stamp(&env, "alice", time.Now())
	c.sent = append(c.sent, env)
	return env, nil
}

func (c *recordingConn) sentCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.sent)
}

func (c *recordingConn) last() agent.Envelope {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sent[len(c.sent)-1]
}

// promptEnv is an elicitation from the fulfiller to alice with its own
// envelope id and call. Its JSON-RPC id is promptRPCID(id): the
// fulfiller never gives two prompts one JSON-RPC id (docs/design.md
// rule 11), and a client takes two open prompts under one for a forgery.
func promptEnv(id, path string) agent.Envelope {
	params := `{"name":"write_file","arguments":{"path":"` + path + `"}}`
	digest, _ := approval.CallDigest("tools/call", []byte(params))
	payload := `{"jsonrpc":"2.0","id":` + promptRPCID(id) + `,"method":"elicitation/create","params":{"message":"m","requestedSchema":{"type":"object","properties":{"approve":{"type":"boolean"}},"required":["approve"]},"_meta":{"proposal":{"id":"p","from":"coder","method":"tools/call","params":` + params + `,"digest":"` + digest + `"}}}}`
	return agent.Envelope{ID: id, From: "fulfiller", To: []string{"alice"}, Kind: agent.KindRequest, Payload: []byte(payload)}
}

// runAutoApprover runs a Client that approves everything, remembering
// the last remember answers, until the test ends; it returns what the
// Client sent and the channel to hand it requests.
func runAutoApprover(t *testing.T, remember int) (*recordingConn, chan<- agent.Envelope) {
	return runAutoApproverWith(t, approver.Options{Remember: remember})
}

// runAutoApproverWith is runAutoApprover with the given options.
func runAutoApproverWith(t *testing.T, o approver.Options) (*recordingConn, chan<- agent.Envelope) {
	conn := &recordingConn{}
	c := approver.New(conn, &approver.Auto{Approve: true}, o)
	in := make(chan agent.Envelope)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx, in) }()
	t.Cleanup(func() { cancel(); <-done })
	return conn, in
}

// The recorded answer is sent again only for the same question (same
// envelope id and bytes); a prompt under a seen id with other content is
// ignored; and only the last Remember answers are kept.
func TestRecordedAnswerReplayedOnlyForTheSameQuestion(t *testing.T) {
	t.Parallel()
	conn, in := runAutoApprover(t, 1)

	a, b := promptEnv("el-a", "/a"), promptEnv("el-b", "/b")
	in <- a
	poll.Until(t, "the answer to a", func() bool { return conn.sentCount() == 1 })
	first := conn.last()

	in <- a // asked again: the recorded answer goes out again
	poll.Until(t, "the answer to a again", func() bool { return conn.sentCount() == 2 })
	if again := conn.last(); !bytes.Equal(again.Payload, first.Payload) || again.CorrelationID.First() != "el-a" || again.ID == first.ID {
		t.Fatalf("replayed %s %v %s, want the same payload to el-a in a new envelope", again.ID, again.CorrelationID, again.Payload)
	}

	in <- promptEnv("el-a", "/etc/passwd") // another call under a seen id
	in <- b                                // answered; with Remember 1, a is forgotten
	poll.Until(t, "the answer to b", func() bool { return conn.sentCount() == 3 })
	if got := conn.last().CorrelationID.First(); got != "el-b" {
		t.Fatalf("third answer is to %s, want el-b (nothing for the changed prompt)", got)
	}
	in <- a // forgotten: neither shown again nor answered
	in <- b // remembered
	poll.Until(t, "b's answer again", func() bool { return conn.sentCount() == 4 })
	if got := conn.last().CorrelationID.First(); got != "el-b" {
		t.Fatalf("fourth answer is to %s, want el-b", got)
	}
}

// The record of shown prompts is bounded: the gateway does not
// authenticate `from`, so anyone can send prompts that claim to come from
// the fulfiller. After SeenLimit newer prompts, the oldest one is
// forgotten: sent again it is a new question (shown and answered), where
// an unbounded record would still ignore it.
func TestSeenPromptsAreBounded(t *testing.T) {
	t.Parallel()
	// The bound is SeenLimit; a small one shows the same behaviour without
	// thousands of cards under -race.
	const limit = 64
	conn, in := runAutoApproverWith(t, approver.WithSeenLimit(approver.Options{Remember: 1}, limit))

	oldest := promptEnv("el-0", "/0")
	in <- oldest
	for i := 1; i <= limit; i++ {
		in <- promptEnv(fmt.Sprintf("el-%d", i), "/x")
	}
	poll.Until(t, "an answer to every prompt", func() bool { return conn.sentCount() == limit+1 })
	in <- oldest
	poll.Until(t, "the forgotten prompt answered as new", func() bool { return conn.sentCount() == limit+2 })
	if got := conn.last().CorrelationID.First(); got != "el-0" {
		t.Fatalf("last answer is to %s, want el-0", got)
	}
}

// promptRPCID is the JSON-RPC id promptEnv gives the prompt with envelope
// id id: one of its own for each envelope id.
func promptRPCID(id string) string {
	h := fnv.New32a()
	h.Write([]byte(id))
	return strconv.FormatUint(uint64(h.Sum32()%1_000_000)+1, 10)
}
