package fulfill_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/proposer"
	"github.com/mewkit/fulfiller/internal/space"
	"github.com/mewkit/fulfiller/internal/spacetest"
	"github.com/mewkit/fulfiller/internal/toolserver"
	"github.com/mewkit/fulfiller/policies"
)

// e2ePolicy fulfils calculator calls, rejects deletion as unsafe, and
// default-denies everything else.
const e2ePolicy = `package fulfiller

default decision := {"action": "reject", "reason": "policy", "message": "not allowed"}

decision := {"action": "fulfill"} if input.tool.name in {"add", "multiply", "sleep", "slow", "divide", "hold"}

decision := {"action": "reject", "reason": "unsafe", "message": "deleting is never allowed"} if input.tool.name == "delete_path"
`

var (
	capsFulfiller = []agent.Capability{{Kind: "mcp/*"}, {Kind: "chat"}}
	capsProposer  = []agent.Capability{{Kind: "mcp/proposal"}, {Kind: "mcp/withdraw"}, {Kind: "chat"}}
	capsTool      = []agent.Capability{{Kind: "mcp/response"}, {Kind: "chat"}}
)

// world is a whole space on loopback: the in-process gateway, a calculator
// tool server, the fulfiller under test (real agent, real Rego engine) and
// a proposer that waits for answers like the reference SDK.
type world struct {
	t     *testing.T
	srv   *space.Server
	wire  *spacetest.Wire
	prop  *proposer.Proposer
	coder *agent.Client
	calc  *agent.Client
	fc    *agent.Client
	tools *toolserver.Server
	ful   *fulfill.Fulfiller
	// held is told each time the tool "hold" starts; it answers "held"
	// once release is closed.
	held    chan struct{}
	release chan struct{}
	gate    *gatedDecider
	stopFul context.CancelFunc
	fulDone chan struct{}
}

type worldOptions struct {
	cfg           fulfill.Config
	fulfillerCaps []agent.Capability
	// agent, when set, adjusts every participant's client settings
	// (fault tests: fast reconnects, short keepalive).
	agent func(*agent.Config)
	// policy replaces e2ePolicy.
	policy string
	// toolStyle is how the calculator answers: as an MCP server echoing
	// JSON-RPC ids (the zero value) or as a reference-SDK participant.
	toolStyle toolserver.Style
	// extraTools are served by the calculator beside its own.
	extraTools []toolserver.Tool
}

// gatedDecider is the real policy engine, except that proposals for the
// tool "slow" wait until the gate opens, so a test can act while a decision
// is in progress.
type gatedDecider struct {
	engine *policies.Engine
	gate   chan struct{}
	once   sync.Once
	calls  atomic.Int64 // evaluations asked for
}

func (g *gatedDecider) Decide(ctx context.Context, in *policies.Input) decision.Decision {
	g.calls.Add(1)
	if in.Tool != nil && in.Tool.Name == "slow" {
		select {
		case <-g.gate:
		case <-ctx.Done():
		}
	}
	return g.engine.Decide(ctx, in)
}

func (g *gatedDecider) open() { g.once.Do(func() { close(g.gate) }) }

func newWorld(t *testing.T, opts worldOptions) *world {
	t.Helper()
	if opts.fulfillerCaps == nil {
		opts.fulfillerCaps = capsFulfiller
	}
	srv, err := space.New(space.Config{Tokens: map[string][]agent.Capability{
		"fulfiller-token": opts.fulfillerCaps,
		"other-token":     capsFulfiller,
		"coder-token":     capsProposer,
		"calc-token":      capsTool,
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	w := &world{t: t, srv: srv, wire: spacetest.RecordWire(t, srv), held: make(chan struct{}, 16), release: make(chan struct{})}
	ctx := context.Background()
	join := func(id, token string) *agent.Client {
		if opts.agent == nil {
			return spacetest.Join(t, ctx, srv, id, token)
		}
		cfg := agent.Config{ID: id, Token: token}
		opts.agent(&cfg)
		return spacetest.JoinWith(t, ctx, srv, cfg)
	}

	tools := append(toolserver.Calculator(), toolserver.Tool{
		Name: "sleep", Description: "Never answers until cancelled",
		Call: func(ctx context.Context, _ json.RawMessage) (string, error) { <-ctx.Done(); return "", ctx.Err() },
	}, toolserver.Tool{Name: "slow", Description: "Answers at once; its decision is slow", Call: func(context.Context, json.RawMessage) (string, error) { return "ok", nil }},
		toolserver.Tool{Name: "hold", Description: "Answers when the test releases it", Call: func(ctx context.Context, _ json.RawMessage) (string, error) {
			w.held <- struct{}{}
			select {
			case <-w.release:
				return "held", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}})
	tools = append(tools, opts.extraTools...)
	w.calc = join("calculator", "calc-token")
	w.tools = spacetest.ServeTools(t, w.calc, tools...)
	w.tools.SetStyle(opts.toolStyle) // before the fulfiller joins and discovers

	dir := t.TempDir()
	if opts.policy == "" {
		opts.policy = e2ePolicy
	}
	if err := os.WriteFile(filepath.Join(dir, "policy.rego"), []byte(opts.policy), 0o644); err != nil {
		t.Fatal(err)
	}
	// A minute, not the 100 ms default: these tests assert decisions, and
	// under -race on a loaded machine a slow evaluation would fail closed.
	engine, err := policies.Load(ctx, policies.Options{Timeout: time.Minute, Policies: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	w.gate = &gatedDecider{engine: engine, gate: make(chan struct{})}

	fc := join("fulfiller", "fulfiller-token")
	w.fc = fc
	cfg := opts.cfg
	cfg.SpaceID = space.DefaultSpaceID
	if cfg.DiscoverySettle == 0 {
		// Nobody forges tools/list here except where a test sets its own
		// settle (TestE2EForgedDiscoveryDetected): do not wait 500ms.
		cfg.DiscoverySettle = time.Millisecond
	}
	w.ful = fulfill.New(fc, w.gate, cfg)
	fulSub := fc.Subscribe(agent.SubscribeOptions{All: true, Impersonations: true})
	fctx, fcancel := context.WithCancel(ctx)
	w.stopFul, w.fulDone = fcancel, make(chan struct{})
	go func() { defer close(w.fulDone); _ = w.ful.Run(fctx, fulSub.C()) }()
	t.Cleanup(w.stopFulfiller)
	t.Cleanup(w.gate.open) // runs first: a gated decision must not hold shutdown
	poll.Until(t, "tool discovery", func() bool { return len(w.ful.Tools()) == len(tools) })

	w.coder = join("coder", "coder-token")
	w.prop = spacetest.NewProposer(t, w.coder)
	return w
}

func (w *world) stopFulfiller() {
	w.stopFul()
	<-w.fulDone
}

// propose sends a proposal from coder and returns its id.
func (w *world) propose(id, payload string, to ...string) string {
	w.t.Helper()
	id, err := w.prop.Propose(context.Background(), id, to, json.RawMessage(payload))
	if err != nil {
		w.t.Fatal(err)
	}
	return id
}

func (w *world) outcome(id string) proposer.Outcome {
	w.t.Helper()
	return w.outcomeWithin(id, spacetest.Timeout)
}

// outcomeWithin is outcome with a wait of its own, for tests whose
// answer waits on a reconnect (slow on a loaded machine).
func (w *world) outcomeWithin(id string, d time.Duration) proposer.Outcome {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	out, err := w.prop.Wait(ctx, id)
	if err != nil {
		w.t.Fatalf("proposal %s: %v (so far %+v)", id, err, out)
	}
	// The wire record is the space's broadcast seen on its own stream;
	// wait until it has caught up with what the proposer saw.
	switch {
	case out.RejectedBy != "":
		w.onWire("the reject of "+id, func(e agent.Envelope) bool { return e.Kind == agent.KindReject && e.CorrelationID.First() == id })
	case out.Fulfilled:
		w.onWire("the fulfilment of "+id, func(e agent.Envelope) bool {
			return e.Kind == agent.KindResponse && e.From == "calculator" && w.answeredBy(e, id)
		})
	}
	return out
}

// answeredBy reports whether resp answers a request correlated to id.
func (w *world) answeredBy(resp agent.Envelope, id string) bool {
	for _, e := range w.wire.Envelopes() {
		if e.Kind == agent.KindRequest && e.ID == resp.CorrelationID.First() && e.CorrelationID.First() == id {
			return true
		}
	}
	return false
}

// answers returns the fulfiller's envelopes on the wire that answer the
// proposal: fulfilment requests correlated to it and rejects of it.
func (w *world) answers(id string) []agent.Envelope {
	var out []agent.Envelope
	for _, env := range w.wire.Envelopes() {
		if env.From != "fulfiller" || env.CorrelationID.First() != id {
			continue
		}
		if env.Kind == agent.KindReject || (env.Kind == agent.KindRequest && !strings.Contains(string(env.Payload), "notifications/")) {
			out = append(out, env)
		}
	}
	return out
}

func (w *world) onWire(what string, pred func(agent.Envelope) bool) agent.Envelope {
	w.t.Helper()
	return w.wire.WaitFor(w.t, what, pred)
}

// exact is spacetest.Exact with JSON-RPC ids (and the ids cancellations
// name) blanked: they come from the process's one sequence, which
// discovery uses too, so their values depend on how many requests went
// before. TestE2EJSONRPCIDsNeverRepeat checks them instead.
func exact(t testing.TB, env agent.Envelope, want string, keys ...string) {
	t.Helper()
	env.Raw = rpcIDs.ReplaceAll(env.Raw, []byte(`$1"*"`))
	spacetest.Exact(t, env, rpcIDs.ReplaceAllString(want, `$1"*"`), keys...)
}

var rpcIDs = regexp.MustCompile(`("jsonrpc":"2\.0","id":|"requestId":)[0-9]+`)

func TestE2EFulfilBroadcast(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{})
	id := w.propose("proposal-add-1", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add","arguments":{"a":10,"b":5}}}`)
	out := w.outcome(id)
	if !out.Fulfilled || out.FulfilledBy != "fulfiller" || string(out.Result) != `{"content":[{"type":"text","text":"15"}]}` {
		t.Fatalf("outcome %+v result %s", out, out.Result)
	}
	ans := w.answers(id)
	if len(ans) != 1 {
		t.Fatalf("%d answers, want exactly 1", len(ans))
	}
	exact(t, ans[0], `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["calculator"],"kind":"mcp/request","correlation_id":["proposal-add-1"],"payload":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add","arguments":{"a":10,"b":5}}}}`)
	resp := w.onWire("the calculator's response", func(e agent.Envelope) bool {
		return e.Kind == agent.KindResponse && e.CorrelationID.First() == ans[0].ID
	})
	exact(t, resp, `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"calculator","to":["fulfiller"],"kind":"mcp/response","correlation_id":["`+ans[0].ID+`"],"payload":{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"15"}]}}}`)
}

func TestE2EFulfilTargeted(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{})
	id := w.propose("proposal-mul-2", `{"method":"tools/call","params":{"name":"multiply","arguments":{"a":7,"b":8}}}`, "calculator")
	out := w.outcome(id)
	if !out.Fulfilled || string(out.Result) != `{"content":[{"type":"text","text":"56"}]}` {
		t.Fatalf("outcome %+v", out)
	}
	exact(t, w.answers(id)[0], `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["calculator"],"kind":"mcp/request","correlation_id":["proposal-mul-2"],"payload":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"multiply","arguments":{"a":7,"b":8}}}}`)
}

func TestE2ERejectWithReasonAndChat(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{})
	id := w.propose("proposal-danger-4", `{"method":"tools/call","params":{"name":"delete_path","arguments":{"path":"/"}}}`)
	out := w.outcome(id)
	if !out.Rejected || out.Reason != "unsafe" || out.RejectedBy != "fulfiller" {
		t.Fatalf("outcome %+v", out)
	}
	ans := w.answers(id)
	exact(t, ans[0], `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["coder"],"kind":"mcp/reject","correlation_id":["proposal-danger-4"],"payload":{"reason":"unsafe"}}`)
	chat := w.onWire("the explanation", func(e agent.Envelope) bool { return e.Kind == agent.KindChat && e.CorrelationID.First() == ans[0].ID })
	if !bytes.Equal(chat.Payload, []byte(`{"text":"deleting is never allowed","format":"plain"}`)) || chat.To[0] != "coder" {
		t.Errorf("chat %s to %v", chat.Payload, chat.To)
	}
}

func TestE2EInvalid(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{})
	id := w.propose("bad-1", `{"params":{"name":"add"}}`)
	out := w.outcome(id)
	if out.Reason != "invalid" {
		t.Fatalf("outcome %+v", out)
	}
	exact(t, w.answers(id)[0], `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["coder"],"kind":"mcp/reject","correlation_id":["bad-1"],"payload":{"reason":"invalid"}}`)
	if chat := waitChat(t, w.prop, id); chat != "proposal payload has no method" {
		t.Errorf("chat %q", chat)
	}
}

func TestE2EIncapable(t *testing.T) {
	t.Parallel()
	t.Run("unknown tool", func(t *testing.T) {
		w := newWorld(t, worldOptions{cfg: fulfill.Config{DiscoveryWait: 50 * time.Millisecond}})
		id := w.propose("proposal-div-7", `{"method":"tools/call","params":{"name":"divide","arguments":{"a":1,"b":0}}}`)
		out := w.outcome(id)
		if out.Reason != "incapable" {
			t.Fatalf("outcome %+v", out)
		}
		if chat := waitChat(t, w.prop, id); chat != `no participant in the space offers tool "divide"` {
			t.Errorf("chat %q", chat)
		}
	})
	t.Run("own capabilities lacking", func(t *testing.T) {
		w := newWorld(t, worldOptions{fulfillerCaps: []agent.Capability{
			{Kind: "mcp/request", Payload: map[string]any{"method": "tools/list"}}, {Kind: "mcp/reject"}, {Kind: "chat"},
		}})
		id := w.propose("p1", `{"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}`)
		if out := w.outcome(id); out.Reason != "incapable" {
			t.Fatalf("outcome %+v", out)
		}
		if chat := waitChat(t, w.prop, id); chat != "fulfiller's capabilities do not allow mcp/request tools/call" {
			t.Errorf("chat %q", chat)
		}
	})
}

func TestE2EDuplicateID(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{})
	id := w.propose("dup-1", `{"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":1}}}`)
	w.outcome(id)
	// The same id again, identical and different: never answered again.
	if _, err := w.coder.Send(context.Background(), agent.Envelope{ID: "dup-1", Kind: agent.KindProposal, Payload: json.RawMessage(`{"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":1}}}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.coder.Send(context.Background(), agent.Envelope{ID: "dup-1", Kind: agent.KindProposal, Payload: json.RawMessage(`{"method":"tools/call","params":{"name":"delete_path","arguments":{"path":"/"}}}`)}); err != nil {
		t.Fatal(err)
	}
	marker := w.propose("after-dup", `{"method":"tools/call","params":{"name":"add","arguments":{"a":2,"b":2}}}`)
	w.outcome(marker) // handled in order, so the duplicates were seen by now
	if n := len(w.answers(id)); n != 1 {
		t.Errorf("dup-1 answered %d times, want 1", n)
	}
}

func TestE2EWithdrawBeforeDecision(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{})
	id := w.propose("proposal-slow-3", `{"method":"tools/call","params":{"name":"slow"}}`)
	poll.Until(t, "deciding", func() bool { s, ok := w.ful.Get(id); return ok && s.State == "deciding" })
	if err := w.prop.Withdraw(context.Background(), id, "no_longer_needed"); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "withdrawal", func() bool { _, ok := w.ful.Get(id); return !ok })
	w.gate.open()
	marker := w.propose("marker", `{"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":1}}}`)
	w.outcome(marker)
	if n := len(w.answers(id)); n != 0 {
		t.Errorf("withdrawn proposal answered %d times", n)
	}
}

func TestE2ESpoofedWithdrawIgnored(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{})
	id := w.propose("proposal-slow-5", `{"method":"tools/call","params":{"name":"slow"}}`)
	poll.Until(t, "deciding", func() bool { s, ok := w.ful.Get(id); return ok && s.State == "deciding" })
	// The gateway does not authenticate from: another participant can
	// write a withdrawal that claims to come from anyone but the proposer.
	other, err := agent.Dial(context.Background(), agent.Config{URL: w.srv.URL(), ID: "mallory", Token: "coder-token"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Send(context.Background(), agent.Envelope{Kind: agent.KindWithdraw, CorrelationID: agent.CorrelationIDs{id}, Payload: json.RawMessage(`{"reason":"no_longer_needed"}`)}); err != nil {
		t.Fatal(err)
	}
	w.onWire("mallory's withdrawal", func(e agent.Envelope) bool { return e.Kind == agent.KindWithdraw && e.From == "mallory" })
	w.gate.open()
	if out := w.outcome(id); !out.Fulfilled {
		t.Fatalf("spoofed withdrawal stopped the proposal: %+v", out)
	}
}

func TestE2ELateWithdrawIgnored(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{cfg: fulfill.Config{FulfillTimeout: 5 * time.Second}})
	id := w.propose("p-sleep", `{"method":"tools/call","params":{"name":"sleep"}}`)
	w.onWire("the fulfilment request", func(e agent.Envelope) bool { return e.Kind == agent.KindRequest && e.CorrelationID.First() == id })
	if err := w.prop.Withdraw(context.Background(), id, "no_longer_needed"); err != nil {
		t.Fatal(err)
	}
	w.onWire("the withdrawal", func(e agent.Envelope) bool { return e.Kind == agent.KindWithdraw })
	marker := w.propose("marker", `{"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":1}}}`)
	w.outcome(marker)
	if s, ok := w.ful.Get(id); !ok || s.State != "fulfilling" {
		t.Errorf("after a late withdrawal: %+v %v, want still fulfilling", s, ok)
	}
}

func TestE2ESupersededByAnotherFulfiller(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{})
	id := w.propose("proposal-slow-6", `{"method":"tools/call","params":{"name":"slow"}}`)
	poll.Until(t, "deciding", func() bool { s, ok := w.ful.Get(id); return ok && s.State == "deciding" })
	other, err := agent.Dial(context.Background(), agent.Config{URL: w.srv.URL(), ID: "other-fulfiller", Token: "other-token"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Send(context.Background(), agent.Envelope{To: []string{"calculator"}, Kind: agent.KindRequest, CorrelationID: agent.CorrelationIDs{id},
		Payload: json.RawMessage(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow"}}`)}); err != nil {
		t.Fatal(err)
	}
	out := w.outcome(id)
	if out.FulfilledBy != "other-fulfiller" {
		t.Fatalf("outcome %+v", out)
	}
	poll.Until(t, "superseded", func() bool { _, ok := w.ful.Get(id); return !ok })
	w.gate.open()
	marker := w.propose("marker", `{"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":1}}}`)
	w.outcome(marker)
	if n := len(w.answers(id)); n != 0 {
		t.Errorf("fulfiller answered a superseded proposal %d times", n)
	}
}

func TestE2EFulfilTimeout(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{cfg: fulfill.Config{FulfillTimeout: 200 * time.Millisecond}})
	id := w.propose("p-sleep", `{"method":"tools/call","params":{"name":"sleep"}}`)
	out := w.outcome(id)
	if out.Reason != "timeout" {
		t.Fatalf("outcome %+v", out)
	}
	ans := w.answers(id)
	if len(ans) != 2 || ans[0].Kind != agent.KindRequest || ans[1].Kind != agent.KindReject {
		t.Fatalf("answers %v, want the fulfilment request then the reject", ans)
	}
	cancel := w.onWire("the cancellation", func(e agent.Envelope) bool { return e.CorrelationID.First() == ans[0].ID && e.From == "fulfiller" })
	exact(t, cancel, `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["calculator"],"kind":"mcp/request","correlation_id":["`+ans[0].ID+`"],"payload":{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"timeout"}}}`)
	exact(t, ans[1], `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["coder"],"kind":"mcp/reject","correlation_id":["p-sleep"],"payload":{"reason":"timeout"}}`)
}

func TestE2EMaxPendingOverflow(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{cfg: fulfill.Config{MaxPending: 2, MaxPendingPerProposer: 2}})
	const n = 8
	ids := make([]string, n)
	for i := range ids {
		ids[i] = w.propose(fmt.Sprintf("flood-%d", i), `{"method":"tools/call","params":{"name":"slow"}}`)
	}
	for _, id := range ids[2:] {
		if out := w.outcome(id); out.Reason != "busy" {
			t.Errorf("%s: %+v, want busy", id, out)
		}
	}
	w.gate.open()
	for _, id := range ids[:2] {
		if out := w.outcome(id); !out.Fulfilled {
			t.Errorf("%s: %+v, want fulfilled (older work is never evicted)", id, out)
		}
	}
	for _, id := range ids {
		if got := len(w.answers(id)); got != 1 {
			t.Errorf("%s answered %d times, want exactly once", id, got)
		}
	}
}

func TestE2EPendingTTLExpiry(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{cfg: fulfill.Config{PendingTTL: 300 * time.Millisecond}})
	id := w.propose("p-ttl", `{"method":"tools/call","params":{"name":"slow"}}`)
	if out := w.outcome(id); out.Reason != "timeout" {
		t.Fatalf("outcome %+v", out)
	}
	w.gate.open()
	marker := w.propose("marker", `{"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":1}}}`)
	w.outcome(marker)
	if got := len(w.answers(id)); got != 1 {
		t.Errorf("answered %d times, want once", got)
	}
}

func TestE2EShutdownAnswersPendingWork(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{})
	a := w.propose("p-a", `{"method":"tools/call","params":{"name":"slow"}}`)
	b := w.propose("p-b", `{"method":"tools/call","params":{"name":"slow"}}`)
	poll.Until(t, "both pending", func() bool { return len(w.ful.Pending()) == 2 })
	w.stopFulfiller()
	for _, id := range []string{a, b} {
		out := w.outcome(id)
		if out.Reason != "other" {
			t.Errorf("%s: %+v, want reject other", id, out)
		}
		if chat := waitChat(t, w.prop, id); chat != "fulfiller is shutting down; propose again later" {
			t.Errorf("%s chat %q", id, chat)
		}
	}
}

// waitChat is the chat explaining proposal id's answer, waited for at
// most 30 s: a chat that never comes fails the test instead of hanging
// the run.
func waitChat(t *testing.T, p *proposer.Proposer, id string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return p.WaitChat(ctx, id)
}
