package fulfill_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/policies"
)

// fakeFront is a front end that is not MEW, as the MCP one is not: its
// proposals are a client's tools/call requests to the upstream "files",
// which offers read_file and delete_file, and its wire hands the core's
// effects to the test.
type fakeFront struct {
	wire *fakeWire
	n    atomic.Int64
}

func (f *fakeFront) Name() string                 { return "fake" }
func (f *fakeFront) Wire() lifecycle.Wire         { return f.wire }
func (f *fakeFront) IDs() lifecycle.IDs           { return f }
func (f *fakeFront) EnvelopeID() string           { return fmt.Sprintf("env-%d", f.n.Add(1)) }
func (f *fakeFront) RPCID() int64                 { return f.n.Add(1) }
func (f *fakeFront) DecisionID() string           { return fulfill.NewDecisionID() }
func (f *fakeFront) PromptID() string             { return fmt.Sprintf("prompt-%d", f.n.Add(1)) }
func (f *fakeFront) upstreamOffers(t string) bool { return t == "read_file" || t == "delete_file" }

func (f *fakeFront) Input(_ context.Context, p *lifecycle.Proposal, in *policies.Input) {
	in.Proposer = &policies.Participant{ID: p.From, Client: json.RawMessage(`{"name":"test-client"}`)}
	in.Agent.ID = "fulfiller-mcp"
}

func (f *fakeFront) Tool(p *lifecycle.Proposal, _ string, params json.RawMessage) (*policies.Tool, json.RawMessage) {
	if p.Tool == "" {
		return nil, nil
	}
	var call struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	_ = json.Unmarshal(params, &call)
	t := &policies.Tool{Name: call.Name, Arguments: call.Arguments}
	if f.upstreamOffers(call.Name) {
		t.Server, t.Description = "files", "a file tool"
	}
	return t, json.RawMessage(`{"type":"object"}`)
}

func (f *fakeFront) Route(_ context.Context, p *lifecycle.Proposal, _ string, _ decision.Decision) (string, string) {
	if !f.upstreamOffers(p.Tool) {
		return "", "no upstream offers " + p.Tool
	}
	return "files", ""
}

// fakeWire hands the requests and rejects the core sends to the test.
type fakeWire struct {
	requests chan lifecycle.SendRequest
	rejects  chan lifecycle.SendReject
}

func (w *fakeWire) SendReject(_ context.Context, r lifecycle.SendReject) error {
	w.rejects <- r
	return nil
}

func (w *fakeWire) SendRequest(_ context.Context, r lifecycle.SendRequest) error {
	w.requests <- r
	return nil
}

func (w *fakeWire) SendRelay(context.Context, lifecycle.SendRelay) error                    { return nil }
func (w *fakeWire) SendCancel(context.Context, lifecycle.SendCancel)                        {}
func (w *fakeWire) Status(context.Context, lifecycle.Status)                                {}
func (w *fakeWire) CancelAsk(context.Context, lifecycle.CancelAsk)                          {}
func (w *fakeWire) CancelTask(context.Context, lifecycle.CancelTask)                        {}
func (w *fakeWire) FollowTask(context.Context, lifecycle.FollowTask, func(lifecycle.Event)) {}

// engineEvents is an Observer that keeps every event.
type engineEvents struct {
	mu     sync.Mutex
	events []fulfill.Event
	added  chan struct{}
}

func (o *engineEvents) Observe(e fulfill.Event) {
	o.mu.Lock()
	o.events = append(o.events, e)
	o.mu.Unlock()
	select {
	case o.added <- struct{}{}:
	default:
	}
}

// await returns proposal id's first event of stage, waiting for it.
func (o *engineEvents) await(t *testing.T, id string, stage fulfill.Stage) fulfill.Event {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		o.mu.Lock()
		for _, e := range o.events {
			if e.ProposalID == id && e.Stage == stage {
				o.mu.Unlock()
				return e
			}
		}
		o.mu.Unlock()
		select {
		case <-o.added:
		case <-deadline:
			t.Fatalf("no %s event of %s", stage, id)
		}
	}
}

const enginePolicy = `package fulfiller

default decision := {"action": "reject", "reason": "policy", "message": "not allowed"}

decision := {"action": "fulfill"} if {
	input.front_end == "fake"
	input.tool.name == "read_file"
	input.tool.server == "files"
	input.proposer.id == "client-1"
	input.proposer.client.name == "test-client"
}

decision := {"action": "reject", "reason": "unsafe", "message": "deleting is never allowed"} if input.tool.name == "delete_file"

decision := {"action": "fulfill"} if input.tool.name == "format_disk"
`

// fakeCall is the proposal of a tools/call from client-1, as a front end
// posts it.
func fakeCall(id, tool string) lifecycle.Proposed {
	params := `{"name":"` + tool + `","arguments":{"path":"/tmp/a"}}`
	env := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":` + params + `}`
	return lifecycle.Proposed{ID: id, From: "client-1", FrontEnd: "fake", Method: "tools/call", Tool: tool,
		Envelope: json.RawMessage(env), Params: json.RawMessage(params), Size: len(env)}
}

// An engine with a front end that is not MEW decides its proposals with
// the real policy engine on the input the front end fills in: a fulfil
// goes out as the front end's SendRequest to the route, with the call's
// params; a reject as its SendReject with the policy's reason and
// message; the upstream's answer ends the proposal fulfilled. Every
// line the observers get names the front end, and the decided line
// carries the input the policy saw.
func TestEngineWithAFrontEndThatIsNotMEW(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "policy.rego"), []byte(enginePolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	pol, err := policies.Load(t.Context(), policies.Options{Timeout: time.Minute, Policies: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	fe := &fakeFront{wire: &fakeWire{requests: make(chan lifecycle.SendRequest, 4), rejects: make(chan lifecycle.SendReject, 4)}}
	obs := &engineEvents{added: make(chan struct{}, 1)}
	eng := fulfill.NewEngine(fe, pol, fulfill.Config{Observer: obs})

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	if err := eng.Post(ctx, fakeCall("p-read", "read_file")); err != nil {
		t.Fatal(err)
	}
	var req lifecycle.SendRequest
	select {
	case req = <-fe.wire.requests:
	case <-time.After(30 * time.Second):
		t.Fatal("no request for the fulfilled call")
	}
	if req.ID != "p-read" || req.To != "files" || string(req.Params) != `{"name":"read_file","arguments":{"path":"/tmp/a"}}` || req.Task {
		t.Errorf("request %+v", req)
	}
	decided := obs.await(t, "p-read", fulfill.StageDecided)
	if decided.FrontEnd != "fake" || decided.Decision == nil || decided.Decision.Action != decision.Fulfill || decided.Target != "" ||
		decided.Input == nil || decided.Input.FrontEnd != "fake" || decided.Input.Tool == nil || decided.Input.Tool.Server != "files" ||
		decided.Input.Agent.ID != "fulfiller-mcp" || decided.Input.Agent.MaxPending != 1000 {
		t.Errorf("decided %+v (input %+v)", decided, decided.Input)
	}
	if ev := obs.await(t, "p-read", fulfill.StageFulfilling); ev.FrontEnd != "fake" || ev.Target != "files" || ev.DecisionID != decided.DecisionID {
		t.Errorf("fulfilling %+v, decided under %s", ev, decided.DecisionID)
	}
	if err := eng.Post(ctx, lifecycle.Responded{RequestID: req.EnvelopeID, From: "files",
		Result: json.RawMessage(`{"content":[{"type":"text","text":"hello"}]}`)}); err != nil {
		t.Fatal(err)
	}
	if ev := obs.await(t, "p-read", fulfill.StageFulfilled); ev.FrontEnd != "fake" || string(ev.Result) != `{"content":[{"type":"text","text":"hello"}]}` {
		t.Errorf("fulfilled %+v", ev)
	}

	if err := eng.Post(ctx, fakeCall("p-delete", "delete_file")); err != nil {
		t.Fatal(err)
	}
	select {
	case rej := <-fe.wire.rejects:
		if rej.ID != "p-delete" || rej.To != "client-1" || rej.Reason != "unsafe" || rej.Message != "deleting is never allowed" {
			t.Errorf("reject %+v", rej)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no reject of the delete")
	}
	if ev := obs.await(t, "p-delete", fulfill.StageRejected); ev.FrontEnd != "fake" || ev.Reason != "unsafe" {
		t.Errorf("rejected %+v", ev)
	}

	// A call the policy fulfils and nobody can carry out (the front
	// end's Route finds no upstream) is rejected "incapable".
	if err := eng.Post(ctx, fakeCall("p-none", "format_disk")); err != nil {
		t.Fatal(err)
	}
	select {
	case rej := <-fe.wire.rejects:
		if rej.ID != "p-none" || rej.Reason != "incapable" {
			t.Errorf("reject %+v", rej)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no reject of the unknown tool")
	}
}
