package elicit_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/grants/grantstore"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/fulfill/state"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/proposer"
	"github.com/mewkit/fulfiller/internal/space"
	"github.com/mewkit/fulfiller/internal/spacetest"
	"github.com/mewkit/fulfiller/internal/testenv"
	"github.com/mewkit/fulfiller/internal/toolserver"
	"github.com/mewkit/fulfiller/policies"
)

func TestMain(m *testing.M) {
	// golang-lru's expirable cache (fulfill's pending store) starts a
	// sweeper goroutine that it never stops.
	// Twice GOMAXPROCS tests at once: they mostly wait, each on a
	// world of its own.
	testenv.MoreParallel()
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/hashicorp/golang-lru/v2/expirable.NewLRU[...].func1"))
}

// e2ePolicy fulfils reads, escalates writes and deletes as data.escalation
// says, and rejects anything under /etc — also after a human edited the
// arguments, so an approver cannot approve past it.
const e2ePolicy = `package fulfiller

default decision := {"action": "reject", "reason": "policy", "message": "not allowed"}

decision := {"action": "fulfill"} if input.tool.name in {"add", "read_file"}

decision := object.union(data.escalation, {"action": "escalate"}) if {
	input.tool.name in {"write_file", "delete_path"}
	not unsafe
	not granted
}

# A grant lets non-destructive writes through, never deletes.
decision := {"action": "fulfill", "message": "granted"} if granted

granted if {
	input.tool.name == "write_file"
	count(input.grants) > 0
	not unsafe
}

decision := {"action": "reject", "reason": "unsafe", "message": "nothing under /etc may be written"} if unsafe

unsafe if startswith(input.tool.arguments.path, "/etc/")
`

var (
	capsFulfiller = []agent.Capability{{Kind: "mcp/*"}, {Kind: "chat"}}
	capsProposer  = []agent.Capability{{Kind: "mcp/proposal"}, {Kind: "mcp/withdraw"}, {Kind: "chat"}}
	capsTool      = []agent.Capability{{Kind: "mcp/response"}, {Kind: "chat"}}
	// Humans answer elicitations, and may reject or carry out a proposal
	// themselves (item 6 of the escalation issue).
	capsHuman = []agent.Capability{{Kind: "mcp/response"}, {Kind: "mcp/request"}, {Kind: "mcp/reject"}, {Kind: "chat"}}
)

// writeCall is the proposal most tests escalate.
const writeCall = `{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/srv/prod/motd","content":"hi"}}}`

// writeDigest is approval.CallDigest of writeCall, computed independently (sha256 of
// the canonical JSON written out by hand).
const writeDigest = "56dcae76b714dbaa642acc38da0ecd147d6fe2a25a07e5745b5fac7f2c0c0264"

type worldOptions struct {
	escalation string   // data.escalation as JSON
	humans     []string // approvers who join the space
	keys       approval.Keys
	// currentKeys, when set, is Config.CurrentKeys: the keys change
	// while the test runs (keys is then not read).
	currentKeys func() approval.ApproverKeys
	approvers   []string // --approvers
	// agent, when set, adjusts every participant's client settings
	// (fault tests: fast reconnects).
	agent func(*agent.Config)
	// stateDir, when set, keeps the fulfiller's pending work in a DIR
	// state store there (restart tests).
	stateDir string
	// offerGrants turns on Config.OfferGrants, and gives the fulfiller
	// grants (in memory) to make.
	offerGrants bool
	// statusChats turns on fulfill.Config.StatusChats.
	statusChats bool
	// authenticatesFrom is run's --gateway-authenticates-from: grants
	// may be pinned to a proposer.
	authenticatesFrom bool
	// observe, when set, also hears the escalations' events (a notifier).
	observe func(elicit.Event)
	// promptKey signs the fulfiller's prompts (Config.PromptKey).
	promptKey ed25519.PrivateKey
}

// world is a whole space on loopback: the in-process gateway, a file tool
// server, the real fulfiller (agent, Rego engine, lifecycle) with the real
// escalation (the lifecycle core's, with elicit's Codec, as the
// sidecar runs it), a proposer, and humans whose answers each test
// scripts.
type world struct {
	t        *testing.T
	srv      *space.Server
	prop     *proposer.Proposer
	coder    *agent.Client
	ful      *fulfill.Fulfiller
	humans   map[string]*human
	logs     *lockedBuffer
	fc       *agent.Client
	fs       *agent.Client
	ctx      context.Context
	wg       *sync.WaitGroup
	join     func(id, token string) *agent.Client
	agentCfg func(*agent.Config)

	// The running fulfiller process: its store, and how to stop it.
	opts      worldOptions
	engine    *policies.Engine
	log       *slog.Logger
	store     *state.Store
	stopFul   func()
	killStore func()

	wire   *spacetest.Wire
	mu     sync.Mutex
	events []elicit.Event
	fevs   []fulfill.Event
	grants *grantstore.Registry // with offerGrants
}

// human is an approver whose client the test drives by hand.
type human struct {
	id     string
	client *agent.Client
	inbox  chan agent.Envelope // mcp/request addressed to them
}

type lockedBuffer = spacetest.Screen

func newWorld(t *testing.T, opts worldOptions) *world {
	t.Helper()
	if opts.humans == nil {
		opts.humans = []string{"alice", "bob"}
	}
	if opts.escalation == "" {
		opts.escalation = `{"approvers":["alice","bob"],"message":"production writes need a human","editable":["path"]}`
	}
	srv, err := space.New(space.Config{Tokens: map[string][]agent.Capability{
		"fulfiller-token": capsFulfiller,
		"coder-token":     capsProposer,
		"tool-token":      capsTool,
		"human-token":     capsHuman,
		"mallory-token":   capsTool,
		"other-token":     capsProposer,
	}})
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, srv: srv, wire: spacetest.RecordWire(t, srv), humans: map[string]*human{}, logs: &lockedBuffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		srv.Close()
		if t.Failed() { // what the fulfiller did, for a failure seen once under load
			t.Logf("the fulfiller's log:\n%s", w.logs.String())
		}
	})
	w.ctx, w.wg = ctx, &wg

	join := func(id, token string) *agent.Client {
		if opts.agent == nil {
			return spacetest.Join(t, ctx, srv, id, token)
		}
		cfg := agent.Config{ID: id, Token: token}
		opts.agent(&cfg)
		return spacetest.JoinWith(t, ctx, srv, cfg)
	}
	w.join, w.agentCfg = join, opts.agent

	files := toolserver.NewFiles(map[string]string{"/srv/prod/motd": "hello"})
	w.fs = join("fs", "tool-token")
	spacetest.ServeTools(t, w.fs, files.Tools()...)

	for _, id := range opts.humans {
		w.arrive(id)
	}

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "policy.rego"), []byte(e2ePolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	dataFile := filepath.Join(dir, "data.json")
	if err := os.WriteFile(dataFile, []byte(`{"escalation":`+opts.escalation+`}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// A minute, not the 100 ms default: these tests assert decisions, and
	// under -race on a loaded machine a slow evaluation would fail closed.
	engine, err := policies.Load(ctx, policies.Options{Timeout: time.Minute, Policies: []string{filepath.Join(dir, "policy.rego")}, Data: []string{dataFile}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}

	w.opts, w.engine = opts, engine
	w.log = slog.New(slog.NewTextHandler(w.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	w.startFulfiller()

	w.coder = join("coder", "coder-token")
	w.prop = spacetest.NewProposer(t, w.coder)
	return w
}

// startFulfiller starts the fulfiller process: its agent and Fulfiller,
// asking through elicit's Codec (on a DIR state store when
// opts.stateDir is set).
func (w *world) startFulfiller() {
	t, opts, ctx, log := w.t, w.opts, w.ctx, w.log
	var cfgStore fulfill.Store
	if opts.stateDir != "" {
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		st, err := state.Open(octx, state.Config{Mode: state.Mode{Kind: state.Dir, Dir: opts.stateDir}, Space: space.DefaultSpaceID, Member: "fulfiller", Lease: time.Second})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		leaseCtx, stopLease := context.WithCancel(ctx)
		if err := st.StartLease(leaseCtx); err != nil {
			t.Fatal(err)
		}
		w.store, cfgStore = st, st
		w.killStore = func() { stopLease(); st.Close() }
		t.Cleanup(w.killStore)
	}
	fc := w.join("fulfiller", "fulfiller-token")
	w.fc = fc
	ecfg := elicit.Config{DefaultApprovers: opts.approvers, Keys: opts.keys, CurrentKeys: opts.currentKeys, Logger: log}
	elicit.LogKeys(ecfg)
	approvals := &fulfill.Approvals{Codec: elicit.Codec{Signer: "fulfiller", PromptKey: opts.promptKey, Logger: log}, OfferGrants: opts.offerGrants,
		Keys: approval.ApproverKeys{Ed25519: opts.keys}, Observer: func(h lifecycle.Human) {
			e := elicit.EventOf(h)
			w.mu.Lock()
			w.events = append(w.events, e)
			w.mu.Unlock()
			if opts.observe != nil {
				opts.observe(e)
			}
		}}
	if opts.currentKeys != nil {
		approvals.CurrentKeys = func() lifecycle.KeySet { return opts.currentKeys() }
	}
	var regStore grantstore.Store
	if w.store != nil {
		regStore = w.store // grants outlive the process with the rest
	}
	if opts.offerGrants {
		w.grants = grantstore.NewRegistry(regStore, log)
		w.grants.GatewayAuthenticatesFrom(opts.authenticatesFrom)
	}
	// DiscoverySettle: nobody in these worlds forges a tools/list
	// answer (fulfill's tests cover that), and the 500 ms default would
	// be waited out by every world before its first proposal.
	w.ful = fulfill.New(fc, w.engine, fulfill.Config{SpaceID: space.DefaultSpaceID, Approvals: approvals, Approvers: opts.approvers, Logger: log, Store: cfgStore, Grants: w.grants,
		StatusChats: opts.statusChats, DiscoverySettle: time.Millisecond,
		Observer: fulfill.ObserverFunc(func(e fulfill.Event) {
			w.mu.Lock()
			w.fevs = append(w.fevs, e)
			w.mu.Unlock()
		})})
	fulSub := fc.Subscribe(agent.SubscribeOptions{All: true})
	fctx, fcancel := context.WithCancel(ctx)
	fulDone := make(chan struct{})
	go func() { defer close(fulDone); _ = w.ful.Run(fctx, fulSub.C()) }()
	regDone := make(chan struct{})
	if reg := w.grants; reg != nil {
		go func() { defer close(regDone); _ = reg.Run(fctx) }()
		<-reg.Ready()
	} else {
		close(regDone)
	}
	var once sync.Once
	w.stopFul = func() {
		once.Do(func() {
			fcancel()
			<-fulDone
			<-regDone
		})
	}
	t.Cleanup(w.stopFul)
	poll.Until(t, "tool discovery", func() bool { return len(w.ful.Tools()) == 4 })
}

// awaitingApproval counts the proposals whose escalation is open.
func (w *world) awaitingApproval() int {
	n := 0
	for _, p := range w.ful.Pending() {
		if p.State == "awaiting_approval" {
			n++
		}
	}
	return n
}

// crashFulfiller stops the fulfiller process as kill -9 would: its store
// and its link go first, so nothing it does on the way down is recorded
// or reaches the space.
func (w *world) crashFulfiller() {
	w.t.Helper()
	w.killStore()
	w.fc.Close()
	poll.Until(w.t, "the fulfiller to be gone", func() bool { _, here := w.coder.Participant("fulfiller"); return !here })
	w.stopFul()
}

// arrive joins a human to the space (again, after leave); the
// elicitations addressed to them land in their inbox, which is kept across
// sessions.
func (w *world) arrive(id string) *human {
	w.t.Helper()
	h := w.humans[id]
	if h == nil {
		h = &human{id: id, inbox: make(chan agent.Envelope, 64)}
		w.humans[id] = h
	}
	cfg := agent.Config{URL: w.srv.URL(), ID: id, Token: "human-token"}
	if w.agentCfg != nil {
		w.agentCfg(&cfg)
	}
	// Subscribed from the join on: a prompt re-sent when they appear must
	// not arrive before the subscription.
	client, subs, err := agent.DialSubscribed(w.ctx, cfg, agent.SubscribeOptions{Kinds: []string{agent.KindRequest}})
	if err != nil {
		w.t.Fatalf("join %s: %v", id, err)
	}
	w.t.Cleanup(func() { client.Close() })
	h.client = client
	sub := subs[0]
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for env := range sub.C() {
			var req agent.RPCRequest
			_ = json.Unmarshal(env.Payload, &req)
			// The fulfiller also asks everyone for tools/list; humans
			// offer none and leave it unanswered.
			if env.From == "fulfiller" && slices.Contains(env.To, h.id) && req.Method != agent.MethodToolsList {
				h.inbox <- env
			}
		}
	}()
	return h
}

// leave takes a human out of the space: their client closes, and the
// space tells everyone (presence leave).
func (w *world) leave(id string) {
	w.t.Helper()
	w.humans[id].client.Close()
	poll.Until(w.t, id+" to be gone", func() bool { _, here := w.fc.Participant(id); return !here })
}

func (w *world) propose(id, payload string) string {
	w.t.Helper()
	id, err := w.prop.Propose(context.Background(), id, nil, json.RawMessage(payload))
	if err != nil {
		w.t.Fatal(err)
	}
	return id
}

// outcome waits for the proposer's answer, and for the tap to have seen it.
func (w *world) outcome(id string) proposer.Outcome {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := w.prop.Wait(ctx, id)
	if err != nil {
		w.t.Fatalf("proposal %s: %v (so far %+v)", id, err, out)
	}
	switch {
	case out.Rejected:
		w.onWire("the reject of "+id, func(e agent.Envelope) bool { return e.Kind == agent.KindReject && e.CorrelationID.First() == id })
	case out.Fulfilled && out.FulfilledBy == "fulfiller":
		req := w.onWire("the fulfilment request of "+id, func(e agent.Envelope) bool {
			return e.Kind == agent.KindRequest && e.From == "fulfiller" && e.CorrelationID.First() == id
		})
		w.onWire("the fulfilment of "+id, func(e agent.Envelope) bool { return e.Kind == agent.KindResponse && e.CorrelationID.First() == req.ID })
	}
	return out
}

// chat waits for the explanation that follows a reject.
func (w *world) chat(id string) string {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return w.prop.WaitChat(ctx, id)
}

// ask waits for the next elicitation (or notification) sent to a human.
func (w *world) ask(who string) agent.Envelope {
	w.t.Helper()
	select {
	case env := <-w.humans[who].inbox:
		return env
	case <-time.After(10 * time.Second):
		w.t.Fatalf("%s was never asked", who)
		return agent.Envelope{}
	}
}

// rpcID returns the JSON-RPC id of a request payload.
func rpcID(t *testing.T, env agent.Envelope) json.RawMessage {
	t.Helper()
	var req agent.RPCRequest
	if err := json.Unmarshal(env.Payload, &req); err != nil || req.Method != agent.MethodElicitationCreate {
		t.Fatalf("not an elicitation: %s", env.Payload)
	}
	return req.ID
}

// answer sends a human's mcp/response to an elicitation.
func (w *world) answer(who string, elicitation agent.Envelope, result string) agent.Envelope {
	w.t.Helper()
	payload := `{"jsonrpc":"2.0","id":` + string(rpcID(w.t, elicitation)) + `,"result":` + result + `}`
	env, err := w.humans[who].client.Send(context.Background(), agent.Envelope{
		To: []string{"fulfiller"}, Kind: agent.KindResponse, CorrelationID: agent.CorrelationIDs{elicitation.ID}, Payload: json.RawMessage(payload),
	})
	if err != nil {
		w.t.Fatal(err)
	}
	return env
}

// forge posts an envelope over the gateway's HTTP injection as poster, with
// whatever from the body claims: the gateway does not check it.
func (w *world) forge(poster, body string) {
	w.t.Helper()
	w.forgeAs(poster, "mallory-token", body)
}

// forgeAs is forge with poster's own token.
func (w *world) forgeAs(poster, token, body string) {
	w.t.Helper()
	url := strings.Replace(w.srv.URL(), "ws://", "http://", 1) + "/participants/" + poster + "/messages"
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		w.t.Fatalf("forged post: %s", resp.Status)
	}
}

func (w *world) wireSnapshot() []agent.Envelope { return w.wire.Envelopes() }

// onWire waits for the first broadcast envelope matching pred.
func (w *world) onWire(what string, pred func(agent.Envelope) bool) agent.Envelope {
	w.t.Helper()
	return w.wire.WaitFor(w.t, what, pred)
}

// cancellation waits for the notifications/cancelled of one elicitation.
func (w *world) cancellation(elicitation agent.Envelope) agent.Envelope {
	w.t.Helper()
	return w.onWire("the cancellation of "+elicitation.ID, func(e agent.Envelope) bool {
		return e.From == "fulfiller" && e.Kind == agent.KindRequest && e.CorrelationID.First() == elicitation.ID
	})
}

// answers returns the fulfiller's answers to a proposal on the wire:
// fulfilment requests correlated to it and rejects of it.
func (w *world) answers(id string) []agent.Envelope {
	var out []agent.Envelope
	for _, env := range w.wireSnapshot() {
		if env.From == "fulfiller" && env.CorrelationID.First() == id && (env.Kind == agent.KindReject || env.Kind == agent.KindRequest) {
			out = append(out, env)
		}
	}
	return out
}

// elicitations returns every elicitation the fulfiller sent, in order.
func (w *world) elicitations() []agent.Envelope {
	var out []agent.Envelope
	for _, env := range w.wireSnapshot() {
		if env.From == "fulfiller" && env.Kind == agent.KindRequest && strings.Contains(string(env.Payload), `"method":"elicitation/create"`) {
			out = append(out, env)
		}
	}
	return out
}

func (w *world) eventsOf(kind elicit.EventKind) []elicit.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []elicit.Event
	for _, e := range w.events {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// event is the fulfiller's first event of stage for proposal id.
func (w *world) event(id string, stage fulfill.Stage) (fulfill.Event, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range w.fevs {
		if e.ProposalID == id && e.Stage == stage {
			return e, true
		}
	}
	return fulfill.Event{}, false
}

func (w *world) approvedBy(id string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range w.fevs {
		if e.ProposalID == id && e.Stage == fulfill.StageApproved {
			return e.By
		}
	}
	return nil
}

// marker proposes a call that is fulfilled at once and waits for it: the
// fulfiller handles envelopes in order, so whatever came before has been
// handled by then.
func (w *world) marker() {
	w.t.Helper()
	id := w.propose("", `{"method":"tools/call","params":{"name":"read_file","arguments":{"path":"/srv/prod/motd"}}}`)
	if out := w.outcome(id); !out.Fulfilled {
		w.t.Fatalf("marker: %+v", out)
	}
}

// exact asserts an envelope's bytes on the wire, with ids, timestamps,
// deadlines and policy revisions blanked.
func exact(t *testing.T, env agent.Envelope, want string) {
	t.Helper()
	spacetest.Exact(t, blankRPCIDs(env), string(blankRPCIDs(agent.Envelope{Raw: json.RawMessage(want)}).Raw), "deadline", "revision")
}

// rpcIDs matches JSON-RPC ids in a payload, and the id a cancellation
// names: they come from the process's one sequence, which discovery uses
// too, so their values depend on how many requests went before.
// TestE2EJSONRPCIDsNeverRepeat checks them instead.
var rpcIDs = regexp.MustCompile(`("jsonrpc":"2\.0","id":|"requestId":)[0-9]+`)

func blankRPCIDs(env agent.Envelope) agent.Envelope {
	env.Raw = rpcIDs.ReplaceAll(env.Raw, []byte(`$1"*"`))
	return env
}

// cancelled is the wire form of a notifications/cancelled to who.
func cancelled(who string, elicitation agent.Envelope, rpc, reason string) string {
	return fmt.Sprintf(`{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["%s"],"kind":"mcp/request","correlation_id":["%s"],"payload":{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%s,"reason":"%s"}}}`,
		who, elicitation.ID, rpc, reason)
}
