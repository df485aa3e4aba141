package fulfill

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/policies"
)

// fakeSpace records what the Fulfiller sends and answers tools/list from a
// table, so lifecycle rules can be tested without a socket.
type fakeSpace struct {
	id   string
	caps []agent.Capability

	mu     sync.Mutex
	roster map[string]agent.Participant
	tools  map[string][]ToolInfo
	sent   chan agent.Envelope
	silent map[string]bool // never answer tools/list
	noList map[string]bool // answer tools/list with "Method not found"
	// listGate holds the tools/list answer of a participant until its
	// channel is closed: a discovery under way.
	listGate map[string]chan struct{}
	// taskAnswer answers the task methods (tasks/get, tasks/result)
	// sent with RequestEnvelope; nil: they fail.
	taskAnswer func(req agent.RPCRequest) (agent.RPCResponse, error)
	rpcSeq     atomic.Int64
	dead       atomic.Bool // a crashed process: nothing reaches the wire
	// crashAtReject, when set before the fulfiller runs, is called as a
	// reject is about to be written: a test's kill -9 at that point.
	crashAtReject func()
}

func newFakeSpace() *fakeSpace {
	return &fakeSpace{
		id:   "fulfiller",
		caps: []agent.Capability{{Kind: "mcp/*"}, {Kind: "chat"}},
		roster: map[string]agent.Participant{
			"coder":      {ID: "coder", Capabilities: []agent.Capability{{Kind: "mcp/proposal"}, {Kind: "mcp/withdraw"}}},
			"calculator": {ID: "calculator", Capabilities: []agent.Capability{{Kind: "mcp/response"}}},
			"other-ful":  {ID: "other-ful", Capabilities: []agent.Capability{{Kind: "mcp/*"}}},
		},
		tools: map[string][]ToolInfo{
			"calculator": {{Name: "add", Description: "Add two numbers", Annotations: json.RawMessage(`{"readOnlyHint":true}`)}},
		},
		sent: make(chan agent.Envelope, 1024),
	}
}

func (s *fakeSpace) ID() string { return s.id }

func (s *fakeSpace) NextRPCID() int64 { return s.rpcSeq.Add(1) }

func (s *fakeSpace) Send(_ context.Context, env agent.Envelope) (agent.Envelope, error) {
	if env.Kind == agent.KindReject && s.crashAtReject != nil {
		s.crashAtReject()
	}
	if s.dead.Load() {
		return agent.Envelope{}, errors.New("test: process crashed")
	}
	agent.Stamp(&env, s.id, time.Now())
	s.sent <- env
	return env, nil
}

func (s *fakeSpace) Can(kind string, payload json.RawMessage) bool {
	return agent.Permits(s.caps, kind, payload)
}

func (s *fakeSpace) Roster() []agent.Participant {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]agent.Participant, 0, len(s.roster))
	for _, p := range s.roster {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (s *fakeSpace) Participant(id string) (agent.Participant, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.roster[id]
	return p, ok
}

// setPresent adds id to the roster or takes it out, as presence would.
func (s *fakeSpace) setPresent(id string, present bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if present {
		s.roster[id] = agent.Participant{ID: id}
	} else {
		delete(s.roster, id)
	}
}

func (s *fakeSpace) RequestEnvelope(ctx context.Context, env agent.Envelope) (agent.RPCResponse, error) {
	var req agent.RPCRequest
	if err := json.Unmarshal(env.Payload, &req); err == nil && strings.HasPrefix(req.Method, "tasks/") {
		s.mu.Lock()
		answer := s.taskAnswer
		s.mu.Unlock()
		if answer == nil || s.dead.Load() {
			<-ctx.Done()
			return agent.RPCResponse{}, ctx.Err()
		}
		return answer(req)
	}
	if err := json.Unmarshal(env.Payload, &req); err != nil || req.Method != agent.MethodToolsList || len(env.To) != 1 {
		return agent.RPCResponse{}, errors.New("unexpected request " + string(env.Payload))
	}
	to := env.To[0]
	s.mu.Lock()
	silent, noList, gate := s.silent[to], s.noList[to], s.listGate[to]
	s.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return agent.RPCResponse{}, ctx.Err()
		}
	}
	if noList {
		return agent.RPCResponse{Error: &agent.RPCError{Code: -32601, Message: "Method not found"}}, nil
	}
	if silent {
		<-ctx.Done()
		return agent.RPCResponse{}, ctx.Err()
	}
	s.mu.Lock()
	tools := s.tools[to]
	s.mu.Unlock()
	if tools == nil {
		tools = []ToolInfo{}
	}
	return agent.RPCResponse{Result: agent.MustPayload(map[string]any{"tools": tools})}, nil
}

// next returns the next envelope the Fulfiller sent, failing after a while.
func (s *fakeSpace) next(t *testing.T) agent.Envelope {
	t.Helper()
	// A bound on an envelope that is to come, not a time the test
	// checks: generous, as the package's tests run side by side on a
	// loaded 2-core machine (5s was missed at load 15).
	return s.nextWithin(t, 15*time.Second)
}

// nextWithin is next with a longer wait, for what follows a restart (a
// resume from the store on a loaded machine takes its time).
func (s *fakeSpace) nextWithin(t *testing.T, d time.Duration) agent.Envelope {
	t.Helper()
	select {
	case env := <-s.sent:
		return env
	case <-time.After(d):
		t.Fatalf("nothing sent within %s", d)
		return agent.Envelope{}
	}
}

// quiet asserts nothing more is sent for a short while.
func (s *fakeSpace) quiet(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case env := <-s.sent:
		t.Fatalf("unexpected envelope sent: %s %s", env.Kind, env.Payload)
	case <-time.After(d):
	}
}

// fakeDecider returns a fixed decision per tool name, optionally holding
// every evaluation until released.
type fakeDecider struct {
	mu        sync.Mutex
	decisions map[string]decision.Decision
	gate      chan struct{} // nil: decide at once
	inputs    []*policies.Input
}

func (d *fakeDecider) Decide(ctx context.Context, in *policies.Input) decision.Decision {
	d.mu.Lock()
	gate := d.gate
	d.inputs = append(d.inputs, in)
	d.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	name := ""
	if in.Tool != nil {
		name = in.Tool.Name
	}
	if dec, ok := d.decisions[name]; ok {
		return dec
	}
	return decision.Decision{Action: decision.Reject, Reason: "policy", Message: "default deny"}
}

func (d *fakeDecider) lastInput() *policies.Input {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.inputs) == 0 {
		return nil
	}
	return d.inputs[len(d.inputs)-1]
}

// harness runs a Fulfiller over a fake space until the test ends.
type harness struct {
	space *fakeSpace
	dec   *fakeDecider
	f     *Fulfiller
	in    chan agent.Envelope
	stop  context.CancelFunc
	done  chan struct{}

	mu     sync.Mutex
	events []Event
}

func newHarness(t *testing.T, cfg Config, dec *fakeDecider) *harness {
	t.Helper()
	return newHarnessOn(t, newFakeSpace(), cfg, dec)
}

// newHarnessOn is newHarness on a fake space the test has set up.
func newHarnessOn(t *testing.T, space *fakeSpace, cfg Config, dec *fakeDecider) *harness {
	t.Helper()
	h := &harness{space: space, dec: dec, in: make(chan agent.Envelope), done: make(chan struct{})}
	cfg.SpaceID = "lab"
	if cfg.DiscoverySettle == 0 {
		cfg.DiscoverySettle = time.Millisecond // nobody forges answers in the fake
	}
	rec := ObserverFunc(func(e Event) {
		h.mu.Lock()
		h.events = append(h.events, e)
		h.mu.Unlock()
	})
	if cfg.Observer != nil { // the test's own observer (a Recorder) too
		cfg.Observer = Observers{rec, cfg.Observer}
	} else {
		cfg.Observer = rec
	}
	h.f = New(h.space, dec, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	h.stop = cancel
	go func() {
		defer close(h.done)
		_ = h.f.Run(ctx, h.in)
	}()
	waitFor(t, func() bool { return len(h.f.catalog.owners("add")) == 1 })
	t.Cleanup(h.shutdown)
	return h
}

func (h *harness) shutdown() {
	h.stop()
	<-h.done
}

func (h *harness) deliver(env agent.Envelope) {
	if env.Protocol == "" {
		env.Protocol = agent.ProtocolV04
	}
	h.in <- env
}

// handled returns once the fulfiller has handled every frame delivered
// so far: the reader takes a frame only after it handled the one before
// (a chat changes nothing), and what it posted is applied before a
// later read of the core (Pending, Get).
func (h *harness) handled() {
	h.deliver(agent.Envelope{ID: "sync-" + agent.NewID("test"), From: "nobody", Kind: agent.KindChat, Payload: json.RawMessage(`{"text":""}`)})
}

func (h *harness) stages(id string) []Stage {
	h.mu.Lock()
	defer h.mu.Unlock()
	return stagesOf(h.events, id)
}

// stagesOf lists the stages of proposal id's events, in order.
func stagesOf(events []Event, id string) []Stage {
	var out []Stage
	for _, e := range events {
		if e.ProposalID == id {
			out = append(out, e.Stage)
		}
	}
	return out
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	poll.Until(t, "the condition", cond)
}

func proposalEnv(id, from, payload string, to ...string) agent.Envelope {
	return agent.Envelope{ID: id, From: from, To: to, Kind: agent.KindProposal, Payload: json.RawMessage(payload)}
}

const addCall = `{"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}`

func (d *fakeDecider) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.inputs)
}
