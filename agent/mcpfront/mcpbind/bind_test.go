package mcpbind

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/mewkit/fulfiller/agent/mcpfront"
	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/toolserver"
	"github.com/mewkit/fulfiller/policies"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/hashicorp/golang-lru/v2/expirable.NewLRU[...].func1"))
}

// These tests run the binding between a real mcpfront.Front (a go-sdk
// client in front, the in-repo file tools behind) and a real
// lifecycle.Loop, with a table for a policy: they check the translation
// both ways, not the policy engine (the command's tests do that).

// memStore is a lifecycle.Store in memory.
type memStore struct {
	mu   sync.Mutex
	recs map[string]lifecycle.Proposal
	rev  uint64
}

func (s *memStore) Write(_ context.Context, w lifecycle.Write) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.Create {
		if _, ok := s.recs[w.ID]; ok {
			return 0, lifecycle.ErrExists
		}
	}
	s.rev++
	if w.Record == nil {
		delete(s.recs, w.ID)
		return s.rev, nil
	}
	s.recs[w.ID] = *w.Record
	return s.rev, nil
}

func (s *memStore) Read(_ context.Context, id string) (*lifecycle.Proposal, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.recs[id]
	if !ok {
		return nil, nil
	}
	p.Rev = s.rev
	return &p, nil
}

func (s *memStore) Owned(context.Context) ([]lifecycle.Proposal, error) { return nil, nil }

// journal keeps the decision log's lines.
type journal struct {
	mu    sync.Mutex
	lines []lifecycle.Line
}

func (j *journal) Log(_ context.Context, l lifecycle.Line) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.lines = append(j.lines, l)
	return nil
}

// stages are the stages logged for proposal id, in order.
func (j *journal) stages(id string) []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []string
	for _, l := range j.lines {
		if l.ProposalID == id {
			out = append(out, l.Stage)
		}
	}
	return out
}

// table is the test's policy: by tool name, the decision (routed by
// the binding, as the engine's policy step does).
type table struct {
	b     *Binding
	rules map[string]decision.Decision
	mu    sync.Mutex
	ins   []*policies.Input
}

func (t *table) Decide(ctx context.Context, d lifecycle.Decide) lifecycle.Decided {
	p := &d.Proposal
	in := &policies.Input{Params: d.Params}
	t.b.Input(ctx, p, in)
	in.Tool, _ = t.b.Tool(p, p.Addressee, d.Params)
	t.mu.Lock()
	t.ins = append(t.ins, in)
	t.mu.Unlock()
	dec, ok := t.rules[p.Tool]
	if !ok {
		dec = decision.Decision{Action: decision.Reject, Reason: "policy", Message: "no rule"}
	}
	out := lifecycle.Decided{ID: d.ID, Again: d.Again, Decision: lifecycle.Decision{Action: lifecycle.Action(dec.Action),
		Reason: dec.Reason, Message: dec.Message, Approvers: dec.Approvers, Quorum: dec.Quorum, Timeout: dec.Timeout}}
	if dec.Action == decision.Reject {
		return out
	}
	target, why := t.b.Route(ctx, p, "", dec)
	out.Decision.Target, out.Incapable = target, why
	return out
}

func (t *table) inputs() []*policies.Input {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]*policies.Input(nil), t.ins...)
}

type rig struct {
	t     *testing.T
	ctx   context.Context
	b     *Binding
	front *mcpfront.Front
	log   *journal
	pol   *table
	files *toolserver.Files
	calls atomic.Int64
	wg    sync.WaitGroup
	// hung: the upstream's hang tool started; cancelled: it was
	// cancelled.
	hung, cancelled chan struct{}
}

var rules = map[string]decision.Decision{
	"read_file":   {Action: decision.Fulfill},
	"hang":        {Action: decision.Fulfill},
	"write_file":  {Action: decision.Reject, Reason: "policy", Message: "writes outside the repo are not allowed"},
	"delete_path": {Action: decision.Escalate, Approvers: []string{mcpfront.Caller}, Quorum: 1, Message: "a delete needs you"},
}

func newRig(t *testing.T) *rig {
	t.Helper()
	return newRigWith(t, nil)
}

// newRigWith is newRig with the core's configuration changed by tune.
func newRigWith(t *testing.T, tune func(*lifecycle.Config)) *rig {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &rig{t: t, ctx: ctx, log: &journal{}, files: toolserver.NewFiles(map[string]string{"/repo/a.txt": "hello"}),
		hung: make(chan struct{}, 1), cancelled: make(chan struct{}, 1)}
	tools := []toolserver.Tool{{Name: "hang", Description: "Run until cancelled", InputSchema: map[string]any{"type": "object"},
		Call: func(ctx context.Context, _ json.RawMessage) (string, error) {
			r.hung <- struct{}{}
			<-ctx.Done()
			r.cancelled <- struct{}{}
			return "", ctx.Err()
		}}}
	for _, tl := range r.files.Tools() {
		call := tl.Call
		tl.Call = func(ctx context.Context, args json.RawMessage) (string, error) {
			r.calls.Add(1)
			return call(ctx, args)
		}
		tools = append(tools, tl)
	}
	up := toolserver.NewMCP(&mcp.Implementation{Name: "files", Version: "1.0.0"}, tools...)
	r.b = New(Options{})
	front, err := mcpfront.New(mcpfront.Config{Engine: r.b}, mcpfront.Upstream{Name: "files", What: "in memory",
		Transport: func() (mcp.Transport, error) {
			ct, st := mcp.NewInMemoryTransports()
			if _, err := up.Connect(ctx, st, nil); err != nil {
				return nil, err
			}
			return ct, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	r.front = front
	r.pol = &table{b: r.b, rules: rules}
	codec := elicit.Codec{Context: func(p *lifecycle.Proposal) (*policies.Tool, json.RawMessage, bool) {
		tool, schema := r.b.Tool(p, "", nil)
		return tool, schema, false
	}}
	cfg := lifecycle.Config{Member: "m1", MaxPending: 100, MaxInflight: 10, PendingTTL: time.Minute,
		FulfillTimeout: time.Minute, ApprovalTimeout: time.Minute, RetryAfter: 50 * time.Millisecond, Codec: codec,
		Alone: true, ReserveIDs: 16}
	if tune != nil {
		tune(&cfg)
	}
	core := lifecycle.New(cfg, r.b.IDs())
	loop := lifecycle.NewLoop(core, lifecycle.SystemClock{}, &memStore{recs: map[string]lifecycle.Proposal{}}, r.b.Wire(), r.pol, r.log, 50*time.Millisecond)
	r.b.Bind(loop, front)
	r.wg.Add(2)
	go func() { defer r.wg.Done(); _ = loop.Run(ctx) }()
	go func() { defer r.wg.Done(); _ = front.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		r.wg.Wait()
	})
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	if err := front.Ready(rctx, "files"); err != nil {
		t.Fatal(err)
	}
	return r
}

// client connects a go-sdk client (2025-11-25: elicitation while the
// call is held) with opts.
func (r *rig) client(opts *mcp.ClientOptions) *mcp.ClientSession {
	r.t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		_ = r.front.ServeStdio(r.ctx, "files", st)
	}()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "0.1"}, opts).Connect(r.ctx, ct,
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
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

// proposalOf is the id of the one proposal of tool the policy saw.
func (r *rig) proposalOf(tool string) string {
	r.t.Helper()
	for _, in := range r.pol.inputs() {
		if in.Tool != nil && in.Tool.Name == tool {
			var e Envelope
			_ = json.Unmarshal(in.Proposal, &e)
			return e.ID
		}
	}
	r.t.Fatalf("no proposal of %s", tool)
	return ""
}

// waitStages waits until proposal id's lines are want.
func (r *rig) waitStages(id string, want ...string) {
	r.t.Helper()
	w := strings.Join(want, " ")
	if !poll.Within(10*time.Second, func() bool { return strings.Join(r.log.stages(id), " ") == w }) {
		r.t.Fatalf("proposal %s: stages %v, want %v", id, r.log.stages(id), want)
	}
}

func TestFulfilRelaysTheUpstreamsResult(t *testing.T) {
	r := newRig(t)
	cs := r.client(nil)
	res := call(t, cs, "read_file", map[string]any{"path": "/repo/a.txt"})
	if res.IsError || text(res) != "hello" {
		t.Fatalf("read_file: isError %v, %q; want the file's content", res.IsError, text(res))
	}
	ins := r.pol.inputs()
	if len(ins) != 1 {
		t.Fatalf("%d policy inputs, want 1", len(ins))
	}
	in := ins[0]
	if in.FrontEnd != "mcp" || in.Tool.Server != "files" || in.Tool.Name != "read_file" || string(in.Tool.Arguments) != `{"path":"/repo/a.txt"}` ||
		in.Proposer.ID != "local" || string(in.Proposer.Client) != `{"name":"test-client","version":"0.1"}` || in.Tool.Description != "Read a file" ||
		string(in.Tool.Annotations) != `{"idempotentHint":false,"readOnlyHint":true}` || in.Tool.Changed {
		t.Errorf("policy input: front_end %q tool %s server %s arguments %s description %q annotations %s changed %v; proposer %s client %s",
			in.FrontEnd, in.Tool.Name, in.Tool.Server, in.Tool.Arguments, in.Tool.Description, in.Tool.Annotations, in.Tool.Changed, in.Proposer.ID, in.Proposer.Client)
	}
}

func TestRejectNeverReachesTheUpstream(t *testing.T) {
	r := newRig(t)
	cs := r.client(nil)
	res := call(t, cs, "write_file", map[string]any{"path": "/repo/a.txt", "content": "evil"})
	if !res.IsError || text(res) != "fulfiller refused this call (policy): writes outside the repo are not allowed" || res.Meta["fulfiller/reason"] != "policy" {
		t.Fatalf("write_file: isError %v %q meta %v", res.IsError, text(res), res.Meta)
	}
	if got, _ := r.files.Read("/repo/a.txt"); got != "hello" || r.calls.Load() != 0 {
		t.Fatalf("the file is %q after %d upstream calls; want it untouched", got, r.calls.Load())
	}
	r.waitStages(r.proposalOf("write_file"), "received", "decided", "rejected")
}

// caller answers every elicitation with result.
func caller(result *mcp.ElicitResult, asked *atomic.Int64) *mcp.ClientOptions {
	return &mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		asked.Add(1)
		return result, nil
	}}
}

func TestCallerApproves(t *testing.T) {
	r := newRig(t)
	var asked atomic.Int64
	cs := r.client(caller(&mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, &asked))
	res := call(t, cs, "delete_path", map[string]any{"path": "/repo/a.txt"})
	if res.IsError || text(res) != "deleted 1 files under /repo/a.txt" || asked.Load() != 1 {
		t.Fatalf("delete_path: isError %v %q after %d prompts", res.IsError, text(res), asked.Load())
	}
	r.waitStages(r.proposalOf("delete_path"), "received", "decided", "escalated", "approved", "fulfilling", "fulfilled")
}

// Every line of an MCP call names its client, upstream and JSON-RPC id
// as the binding named them at intake (lifecycle.LogFields, kept with
// the record): a fulfilment's, a policy's reject's, an escalation the
// caller approves, and a call rejected busy before any decision (the
// pending bytes are full), which has no decided line to read them from.
func TestEveryLineNamesTheCall(t *testing.T) {
	r := newRig(t)
	var asked atomic.Int64
	cs := r.client(caller(&mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, &asked))
	call(t, cs, "read_file", map[string]any{"path": "/repo/a.txt"})
	call(t, cs, "write_file", map[string]any{"path": "/repo/a.txt", "content": "evil"})
	call(t, cs, "delete_path", map[string]any{"path": "/repo/a.txt"})
	r.waitStages(r.proposalOf("read_file"), "received", "decided", "fulfilling", "fulfilled")
	r.waitStages(r.proposalOf("write_file"), "received", "decided", "rejected")
	r.waitStages(r.proposalOf("delete_path"), "received", "decided", "escalated", "approved", "fulfilling", "fulfilled")

	full := newRigWith(t, func(c *lifecycle.Config) { c.MaxPendingBytes = 1 })
	res := call(t, full.client(nil), "read_file", map[string]any{"path": "/repo/a.txt"})
	if !res.IsError || res.Meta["fulfiller/reason"] != "busy" {
		t.Fatalf("read_file with no pending bytes free: isError %v %q meta %v; want a busy reject", res.IsError, text(res), res.Meta)
	}
	if n := len(full.pol.inputs()); n != 0 {
		t.Fatalf("the policy decided %d calls; want the busy one rejected before any decision", n)
	}
	if !poll.Within(10*time.Second, func() bool {
		full.log.mu.Lock()
		defer full.log.mu.Unlock()
		return slices.ContainsFunc(full.log.lines, func(l lifecycle.Line) bool { return l.Stage == "rejected" })
	}) {
		t.Fatal("no rejected line for the busy call")
	}

	for _, rg := range []*rig{r, full} {
		rpcIDs := map[string]string{} // proposal → rpc_id
		stages := 0
		rg.log.mu.Lock()
		for _, l := range rg.log.lines {
			stages++
			if l.Log == nil || l.Log.Client != "test-client" || l.Log.Server != "files" || len(l.Log.RPCID) == 0 {
				t.Errorf("%s line of %s (%s) names %+v; want client test-client, server files, an rpc_id", l.Stage, l.ProposalID, l.Tool, l.Log)
				continue
			}
			if prev, ok := rpcIDs[l.ProposalID]; ok && prev != string(l.Log.RPCID) {
				t.Errorf("proposal %s: rpc_id %s, then %s", l.ProposalID, prev, l.Log.RPCID)
			}
			rpcIDs[l.ProposalID] = string(l.Log.RPCID)
		}
		rg.log.mu.Unlock()
		seen := map[string]bool{}
		for _, id := range rpcIDs {
			if seen[id] {
				t.Errorf("two proposals have rpc_id %s", id)
			}
			seen[id] = true
		}
		if want := map[*rig]int{r: 3, full: 1}[rg]; len(rpcIDs) != want || stages == 0 {
			t.Errorf("%d proposals logged (%d lines); want %d", len(rpcIDs), stages, want)
		}
	}
}

func TestCallerDeclines(t *testing.T) {
	r := newRig(t)
	var asked atomic.Int64
	cs := r.client(caller(&mcp.ElicitResult{Action: "decline"}, &asked))
	res := call(t, cs, "delete_path", map[string]any{"path": "/repo/a.txt"})
	if !res.IsError || res.Meta["fulfiller/reason"] != "disagree" || text(res) != "fulfiller refused this call (disagree): @caller declined" {
		t.Fatalf("delete_path: isError %v %q meta %v", res.IsError, text(res), res.Meta)
	}
	if _, ok := r.files.Read("/repo/a.txt"); !ok || r.calls.Load() != 0 {
		t.Fatal("the file was deleted after a decline")
	}
}

func TestNoElicitationIsIncapable(t *testing.T) {
	r := newRig(t)
	cs := r.client(nil)
	res := call(t, cs, "delete_path", map[string]any{"path": "/repo/a.txt"})
	want := "fulfiller refused this call (incapable): this client cannot ask you: it did not declare elicitation support, and the policy asks @caller"
	if !res.IsError || res.Meta["fulfiller/reason"] != "incapable" || text(res) != want {
		t.Fatalf("delete_path: isError %v %q meta %v; want %q", res.IsError, text(res), res.Meta, want)
	}
}

// A client that cancels its call while the caller is asked withdraws
// it: the core ends it withdrawn and nothing runs.
func TestCancelWithdraws(t *testing.T) {
	r := newRig(t)
	asking := make(chan struct{})
	cs := r.client(&mcp.ClientOptions{ElicitationHandler: func(ctx context.Context, _ *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		close(asking)
		<-ctx.Done()
		return nil, ctx.Err()
	}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "delete_path", Arguments: map[string]any{"path": "/repo/a.txt"}})
		done <- err
	}()
	select {
	case <-asking:
	case <-time.After(10 * time.Second):
		t.Fatal("the caller was never asked")
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled call returned a result")
	}
	r.waitStages(r.proposalOf("delete_path"), "received", "decided", "escalated", "withdrawn")
	if _, ok := r.files.Read("/repo/a.txt"); !ok || r.calls.Load() != 0 {
		t.Fatal("the file was deleted after a withdrawal")
	}
}

func TestToolChangedReachesThePolicy(t *testing.T) {
	b := New(Options{})
	env, _ := json.Marshal(envelopeOf(mcpfront.Proposal{ID: "p1", Server: "files", Proposer: "alice", Method: "tools/call",
		Params: json.RawMessage(`{"name":"read_file","arguments":{"path":"/x"}}`),
		Tool:   mcpfront.Tool{Name: "read_file", Listed: true, Description: "now evil", Digest: "new", Changed: &mcpfront.ToolChange{Old: "old", New: "new"}}}))
	p := &lifecycle.Proposal{ID: "p1", From: "alice", Method: "tools/call", Tool: "read_file", Addressee: "files", Envelope: env,
		Params: json.RawMessage(`{"name":"read_file","arguments":{"path":"/x"}}`)}
	in := &policies.Input{}
	b.Input(context.Background(), p, in)
	in.Tool, _ = b.Tool(p, "files", nil)
	if !in.Tool.Changed || in.Tool.Digest != "new" || in.Tool.PinnedDigest != "old" || in.Tool.Description != "now evil" || in.Proposer.ID != "alice" {
		t.Fatalf("input.tool %+v proposer %+v", in.Tool, in.Proposer)
	}
	// An approver's edit is decided as edited.
	tool, _ := b.Tool(p, "files", json.RawMessage(`{"name":"read_file","arguments":{"path":"/y"}}`))
	if string(tool.Arguments) != `{"path":"/y"}` {
		t.Fatalf("edited arguments %s", tool.Arguments)
	}
}

// A client that cancels a call the upstream is running: the upstream is
// told (notifications/cancelled), as a proxy would, and the proposal
// ends with the upstream's outcome; nothing reaches the client.
func TestCancelDuringTheCallReachesTheUpstream(t *testing.T) {
	r := newRig(t)
	cs := r.client(nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "hang", Arguments: map[string]any{}})
		done <- err
	}()
	select {
	case <-r.hung:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream never ran the call")
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled call returned a result")
	}
	select {
	case <-r.cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream was never told the call was cancelled")
	}
	r.waitStages(r.proposalOf("hang"), "received", "decided", "fulfilling", "ignored", "fulfilled")
}
