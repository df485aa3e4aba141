package mcpserve_test

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mewkit/fulfiller/agent/mcpfront"
	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/elicit/approval/approverkeys"
	"github.com/mewkit/fulfiller/elicit/approver"
	"github.com/mewkit/fulfiller/elicit/inbox/teaminbox"
	"github.com/mewkit/fulfiller/fulfill/state"
	"github.com/mewkit/fulfiller/internal/mcpserve"
	"github.com/mewkit/fulfiller/internal/passkeytest"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/toolserver"
	"github.com/mewkit/fulfiller/policies"
)

// alicePolicy asks alice (not the caller) about every call of "drop".
const alicePolicy = `package fulfiller

default decision := {"action": "reject", "reason": "policy", "message": "no rule allows this"}

decision := {"action": "escalate", "approvers": ["alice"], "message": "a drop needs alice"} if input.tool.name == "drop"
`

// rig is fulfiller mcp's wiring (mcpserve) in front of an in-process
// upstream with one tool, "drop", with the team inbox hosted
// in-process, and a client on its stdio.
type rig struct {
	srv    *mcpserve.Server
	cs     *mcp.ClientSession
	inbox  string // the inbox's API, http://127.0.0.1:PORT
	origin string
	dir    string // --inbox-dir
	keys   map[string]*passkeytest.Passkey

	mu     sync.Mutex
	events []elicit.Event
}

// start starts the rig. enrol are the approvers enrolled in the inbox
// (their passkeys in its passkeys file, the --approver-keys); elsewhere
// those keyed in another keys file, not enrolled here.
func start(t *testing.T, enrol, elsewhere []string) *rig {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	tmp := t.TempDir()
	r := &rig{dir: filepath.Join(tmp, "inbox"), keys: map[string]*passkeytest.Passkey{}}
	if err := os.Mkdir(r.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	policy := filepath.Join(tmp, "p.rego")
	if err := os.WriteFile(policy, []byte(alicePolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.inbox = "http://" + ln.Addr().String()
	r.origin = passkeytest.Origin(t, r.inbox)
	for _, id := range enrol {
		r.keys[id] = passkeytest.New(t, "localhost", r.origin)
		r.keys[id].Enrol(t, r.dir, id)
	}
	keysFile := filepath.Join(r.dir, teaminbox.PasskeysFile)
	for _, id := range elsewhere {
		keysFile = filepath.Join(tmp, "passkeys")
		r.keys[id] = passkeytest.New(t, "localhost", r.origin)
		r.keys[id].Enrol(t, tmp, id)
	}
	keys, err := approverkeys.Open(keysFile, approverkeys.Options{})
	if err != nil {
		t.Fatal(err)
	}
	inbox, err := teaminbox.New(teaminbox.Options{Dir: r.dir, RPID: "localhost", Origin: r.origin})
	if err != nil {
		t.Fatal(err)
	}
	tools := toolserver.NewMCP(&mcp.Implementation{Name: "tables", Version: "1.0"}, toolserver.Tool{
		Name: "drop", Description: "Drop a table", InputSchema: map[string]any{"type": "object", "properties": map[string]any{"table": map[string]any{"type": "string"}}},
		Call: func(_ context.Context, raw json.RawMessage) (string, error) {
			var a struct{ Table string }
			_ = json.Unmarshal(raw, &a)
			return "dropped " + a.Table, nil
		}})
	var sessions sync.WaitGroup
	t.Cleanup(sessions.Wait)
	up := mcpfront.Upstream{Name: "tables", What: "the test's tables server", Transport: func() (mcp.Transport, error) {
		client, side := mcp.NewInMemoryTransports()
		ss, err := tools.Connect(ctx, side, nil)
		if err != nil {
			return nil, err
		}
		sessions.Go(func() { _ = ss.Wait() })
		return client, nil
	}}
	r.srv, err = mcpserve.Start(ctx, mcpserve.Config{
		Upstreams: []mcpfront.Upstream{up}, State: state.Mode{Kind: state.Memory},
		Policy: policies.Options{Policies: []string{policy}, Timeout: time.Minute},
		Keys:   keys, Inbox: inbox, InboxListener: ln, ApprovalTimeout: time.Minute,
		ApprovalObserver: func(e elicit.Event) { r.mu.Lock(); r.events = append(r.events, e); r.mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.srv.Front().Ready(ctx, "tables"); err != nil {
		t.Fatal(err)
	}
	clientSide, frontSide := mcp.NewInMemoryTransports()
	served := make(chan struct{})
	go func() { defer close(served); _ = r.srv.ServeStdio(ctx, "tables", frontSide) }()
	r.cs, err = mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1.0"}, nil).Connect(ctx, clientSide, nil)
	if err != nil {
		_ = r.srv.Close()
		t.Fatal(err)
	}
	// Close answers the calls still held ("other") first: the client's
	// session ends only once its calls have their answers.
	t.Cleanup(func() { _ = r.srv.Close(); _ = r.cs.Close(); <-served })
	return r
}

// call calls drop in the background: the call is held while alice is
// asked.
func (r *rig) call(table string) <-chan *mcp.CallToolResult {
	out := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := r.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "drop", Arguments: map[string]any{"table": table}})
		if err != nil {
			res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "call failed: " + err.Error()}}}
		}
		out <- res
	}()
	return out
}

func (r *rig) kinds() []elicit.EventKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []elicit.EventKind
	for _, e := range r.events {
		out = append(out, e.Kind)
	}
	return out
}

func text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// TestInboxApproverFulfilsAndDeclines: a call whose policy asks alice
// (not @caller) is held; alice, signed in to the team inbox this
// process hosts, approves it with her passkey and the client gets the
// upstream's exact result; her decline of the next one refuses it
// "disagree", in the words the model reads.
func TestInboxApproverFulfilsAndDeclines(t *testing.T) {
	t.Parallel()
	r := start(t, []string{"alice"}, nil)
	poll.Until(t, "alice connected", func() bool { return r.srv.Approvers().Connected("alice") })
	s := passkeytest.SignIn(t, r.inbox, "alice", r.keys["alice"])

	held := r.call("users")
	req := s.OpenCard()
	select {
	case res := <-held:
		t.Fatalf("the call was answered before alice: %q", text(res))
	default:
	}
	if code, msg := s.Answer(req, map[string]any{"action": "accept", "approve": true}); code != 200 {
		t.Fatalf("alice's approval: %d %s", code, msg)
	}
	if res := <-held; res.IsError || text(res) != "dropped users" {
		t.Fatalf("after alice's approval: isError %v %q, want the upstream's \"dropped users\"", res.IsError, text(res))
	}

	held = r.call("orders")
	req = s.OpenCard()
	if code, msg := s.Answer(req, map[string]any{"action": "decline"}); code != 200 {
		t.Fatalf("alice's decline: %d %s", code, msg)
	}
	if res := <-held; !res.IsError || text(res) != "fulfiller refused this call (disagree): alice declined" {
		t.Fatalf("after alice's decline: isError %v %q", res.IsError, text(res))
	}
	for _, k := range r.kinds() {
		if k == elicit.EventForgery {
			t.Errorf("a signed answer counted as a forgery: %v", r.kinds())
		}
	}
}

// scripted answers every card at once, as told, unsigned.
type scripted struct{ a approver.Answer }

func (u scripted) Ask(context.Context, *approver.Card) (approver.Answer, error) { return u.a, nil }
func (scripted) Notify(approver.Event)                                          {}

// TestInboxUnsignedAnswerForKeyedApproverIsRefused: alice is keyed (her
// passkey in --approver-keys); an approval for her that carries no
// signature, through the in-process channel, is a forgery: refused, and
// the call still waits for her.
func TestInboxUnsignedAnswerForKeyedApproverIsRefused(t *testing.T) {
	t.Parallel()
	r := start(t, nil, []string{"alice"})
	link, err := r.srv.Approvers().Join("alice")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = approver.New(link.Conn, scripted{approver.Answer{Action: "accept", Approve: true}}, approver.Options{Fulfillers: []string{mcpserve.FulfillerID}}).Run(ctx, link.In)
	}()
	t.Cleanup(func() { cancel(); <-done; link.Close() })

	held := r.call("users")
	poll.Until(t, "the forgery refused", func() bool {
		for _, k := range r.kinds() {
			if k == elicit.EventForgery {
				return true
			}
		}
		return false
	})
	var pending []string
	for _, p := range r.srv.Engine().Pending() {
		pending = append(pending, p.State)
	}
	if len(pending) != 1 || pending[0] != "awaiting_approval" {
		t.Errorf("pending after the forgery: %v, want one call still escalated", pending)
	}
	select {
	case res := <-held:
		t.Fatalf("the call was answered on a forged approval: %q", text(res))
	default:
	}
}

// TestEscalatedCallWithInexactNumberIsRefused: a call escalated to alice
// whose arguments hold an integer past 2^53 (9007199254740993: its call
// digest would be 9007199254740992's, so a signed approval of one would
// pass for the other) is never put to alice: it is refused on the wire,
// saying why, and the upstream never runs it.
func TestEscalatedCallWithInexactNumberIsRefused(t *testing.T) {
	t.Parallel()
	r := start(t, []string{"alice"}, nil)
	poll.Until(t, "alice connected", func() bool { return r.srv.Approvers().Connected("alice") })
	s := passkeytest.SignIn(t, r.inbox, "alice", r.keys["alice"])

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := r.cs.CallTool(ctx, &mcp.CallToolParams{Name: "drop", Arguments: json.RawMessage(`{"table":"users","id":9007199254740993}`)})
	if err != nil {
		t.Fatal(err)
	}
	const want = "fulfiller refused this call (incapable): the policy asks for human approval, but the call cannot be shown to an approver: " +
		"call digest: not canonicalizable JSON: the number 9007199254740993 is not an IEEE 754 double (I-JSON, RFC 7493 2.2)"
	if !res.IsError || text(res) != want {
		t.Errorf("the call with 2^53+1: isError %v %q\nwant %q", res.IsError, text(res), want)
	}
	if cards := s.Cards(); len(cards) != 0 {
		t.Errorf("alice was shown %d cards, want none", len(cards))
	}
	// 2^53 itself is a double: that call is put to alice, and runs.
	held := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := r.cs.CallTool(ctx, &mcp.CallToolParams{Name: "drop", Arguments: json.RawMessage(`{"table":"users","id":9007199254740992}`)})
		if err != nil {
			res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
		}
		held <- res
	}()
	req := s.OpenCard()
	if code, msg := s.Answer(req, map[string]any{"action": "accept", "approve": true}); code != 200 {
		t.Fatalf("alice's approval: %d %s", code, msg)
	}
	if res := <-held; res.IsError || text(res) != "dropped users" {
		t.Errorf("the call with 2^53 after alice's approval: isError %v %q", res.IsError, text(res))
	}
}
