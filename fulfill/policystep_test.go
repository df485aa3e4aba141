package fulfill

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/grants"
	"github.com/mewkit/fulfiller/fulfill/grants/grantstore"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/internal/clocktest"
	"github.com/mewkit/fulfiller/policies"
	"github.com/mewkit/fulfiller/policies/toolmeta"
)

// stepEpoch is the policy step tests' time.
var stepEpoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// decideFunc is a Decider of the test's making.
type decideFunc func(ctx context.Context, in *policies.Input) decision.Decision

func (f decideFunc) Decide(ctx context.Context, in *policies.Input) decision.Decision {
	return f(ctx, in)
}

// eventLog records the events an Observer gets.
type eventLog struct {
	mu     sync.Mutex
	events []Event
}

func (l *eventLog) Observe(e Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

// of returns the events of stage so far.
func (l *eventLog) of(stage Stage) []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Event
	for _, e := range l.events {
		if e.Stage == stage {
			out = append(out, e)
		}
	}
	return out
}

// stepRig is a policy step over a fake space whose catalog has
// discovered the space's tool owners, as a running fulfiller's has.
type stepRig struct {
	space *fakeSpace
	cat   *catalog
	clock *clocktest.Manual
	obs   *eventLog
	logs  *bytes.Buffer
	cfg   policyConfig
}

func newStepRig(t *testing.T, space *fakeSpace) *stepRig {
	t.Helper()
	cat := newCatalog(space, slog.New(slog.DiscardHandler), 5*time.Second, time.Millisecond, 4)
	for _, p := range space.Roster() {
		cat.refresh(context.Background(), p.ID)
	}
	cat.wait()
	return &stepRig{space: space, cat: cat, clock: clocktest.New(stepEpoch), obs: &eventLog{}, logs: &bytes.Buffer{},
		cfg: policyConfig{MaxPending: 1000, DecideWorkers: 2,
			ApprovalTimeout: 5 * time.Minute, TaskTimeout: time.Hour, Escalation: true}}
}

func (r *stepRig) step(dec Decider, shadows *shadowing, reg *grantstore.Registry) *policyStep {
	log := slog.New(slog.NewTextHandler(r.logs, nil))
	fe := &mewFront{space: r.space, catalog: r.cat, spaceID: "lab", wait: time.Second}
	return newPolicyStep(fe, dec, r.cfg, r.obs, shadows, reg, log, r.clock)
}

// decideOnly answers every evaluation with d.
func decideOnly(d decision.Decision) Decider {
	return decideFunc(func(context.Context, *policies.Input) decision.Decision { return d })
}

// stepProposal is a claimed proposal from coder, as the core hands it to
// the policy: its envelope as received, and what the reader parsed.
func stepProposal(id, payload string, to ...string) lifecycle.Proposal {
	env := agent.Envelope{Protocol: agent.ProtocolV04, ID: id, From: "coder", To: to, Kind: agent.KindProposal, Payload: json.RawMessage(payload)}
	raw, err := agent.Encode(env)
	if err != nil {
		panic(err)
	}
	c, err := parsePayload(env.Payload)
	if err != nil {
		panic(err)
	}
	p := lifecycle.Proposal{ID: id, From: "coder", Envelope: raw, Params: c.params, Method: c.method, Tool: c.tool,
		Received: stepEpoch, Owner: "fulfiller", Phase: lifecycle.Deciding, DecisionID: "dec-" + id, Claim: "dec-" + id}
	if len(to) > 0 && to[0] != "fulfiller" {
		p.Addressee = to[0]
	}
	return p
}

// extraOf reads what coreDecision kept of the policy's decision.
func extraOf(t *testing.T, d lifecycle.Decision) storedDecision {
	t.Helper()
	sd, ok := policyDecision(&d)
	if !ok {
		t.Fatalf("decision %+v keeps no policy decision", d)
	}
	return sd
}

// The policy input of a tools/call whose owner the catalog knows: the
// envelope byte for byte, the tool as its owner described it with the
// operator's declared annotations alone (the owner adds none), the grants
// covering the call, the proposer and the roster with their
// capabilities, and this member's load as the core counts it. The
// decided event carries that input, and names the grant that let the
// call through.
func TestPolicyStepInputOfAToolsCall(t *testing.T) {
	t.Parallel()
	space := newFakeSpace()
	space.tools["calculator"] = []ToolInfo{{Name: "add", Description: "Add two numbers",
		Annotations: json.RawMessage(`{"readOnlyHint":true}`), Execution: json.RawMessage(`{"taskSupport":"optional"}`)}}
	rig := newStepRig(t, space)
	meta, err := toolmeta.Parse("tool-metadata.yaml", []byte("calculator:\n  add: {annotations: {destructiveHint: true}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	rig.cfg.ToolMetadata = meta
	reg := grantstore.NewRegistry(nil, nil) // no store: loaded at once
	g, err := grants.New("g-1", &decision.Grantable{MaxTTL: time.Hour, Scope: []decision.GrantField{{Path: "tool"}}},
		grants.Call{Tool: "add", Server: "calculator"}, time.Hour, "alice", stepEpoch.Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Create(context.Background(), g); err != nil {
		t.Fatal(err)
	}
	var inputs []*policies.Input
	var mu sync.Mutex
	dec := decideFunc(func(_ context.Context, in *policies.Input) decision.Decision {
		mu.Lock()
		inputs = append(inputs, in)
		mu.Unlock()
		if len(in.Grants) > 0 { // fulfilled on the grant alone
			return decision.Decision{Action: decision.Fulfill, Revision: "sha256:r1"}
		}
		return decision.Decision{Action: decision.Escalate, Revision: "sha256:r1"}
	})
	step := rig.step(dec, nil, reg)

	p := stepProposal("p1", `{"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}`)
	got := decideLogged(context.Background(), step, lifecycle.Decide{ID: "p1", Proposal: p, Pending: 3, Inflight: 1})

	if len(inputs) != 2 {
		t.Fatalf("%d evaluations, want 2 (the decision, and the same input without grants)", len(inputs))
	}
	doc, err := json.Marshal(inputs[0])
	if err != nil {
		t.Fatal(err)
	}
	// The document as policies see it (keys sorted), the proposal in it
	// as parsed from the frame.
	want := `{"agent":{"id":"fulfiller","inflight":1,"max_pending":1000,"pending":3},"front_end":"mew",` +
		`"grants":[{"created":"2026-03-01T11:59:00Z","expires":"2026-03-01T12:59:00Z","granted_by":"alice","id":"g-1","server":"calculator","tool":"add"}],` +
		`"method":"tools/call","now":"2026-03-01T12:00:00Z","params":{"arguments":{"a":1,"b":2},"name":"add"},` +
		`"proposal":{"from":"coder","id":"p1","kind":"mcp/proposal","payload":{"method":"tools/call","params":{"arguments":{"a":1,"b":2},"name":"add"}},"protocol":"mew/v0.4"},` +
		`"proposer":{"capabilities":[{"kind":"mcp/proposal"},{"kind":"mcp/withdraw"}],"id":"coder"},` +
		`"space":{"id":"lab","participants":[` +
		`{"capabilities":[{"kind":"mcp/response"}],"id":"calculator"},` +
		`{"capabilities":[{"kind":"mcp/proposal"},{"kind":"mcp/withdraw"}],"id":"coder"},` +
		`{"capabilities":[{"kind":"mcp/*"}],"id":"other-ful"}]},` +
		`"tool":{"annotations":{"destructiveHint":true},"arguments":{"a":1,"b":2},"description":"Add two numbers",` +
		`"execution":{"taskSupport":"optional"},"name":"add","owner_annotations":{"readOnlyHint":true},"server":"calculator"}}`
	if string(doc) != want {
		t.Errorf("policy input\n got %s\nwant %s", doc, want)
	}
	if string(inputs[0].Proposal) != string(p.Envelope) {
		t.Errorf("input.proposal is not the envelope as received")
	}
	if len(inputs[1].Grants) != 0 || inputs[1].Grants == nil {
		t.Errorf("the second evaluation's grants = %s, want an empty list", inputs[1].Grants)
	}

	if got.ID != "p1" || got.Again || got.Incapable != "" || got.Decision.Action != lifecycle.Fulfill || got.Decision.Target != "calculator" ||
		got.Decision.Revision != "sha256:r1" || got.Decision.Task {
		t.Errorf("decided %+v, want a fulfil routed to calculator, not as a task", got)
	}
	evs := rig.obs.of(StageDecided)
	if len(evs) != 1 {
		t.Fatalf("%d decided events, want 1", len(evs))
	}
	ev := evs[0]
	if ev.GrantID != "g-1" || ev.Input != inputs[0] || ev.ProposalID != "p1" || ev.DecisionID != "dec-p1" ||
		ev.Revision != "sha256:r1" || ev.Proposer != "coder" || ev.Method != "tools/call" || ev.Tool != "add" || ev.Target != "" ||
		!ev.Time.Equal(stepEpoch) || ev.Latency <= 0 || ev.Decision == nil || ev.Decision.Action != decision.Fulfill {
		t.Errorf("decided event %+v", ev)
	}
}

// A decision is logged as the policy made it; the decision acted on (and
// kept with the record) carries the grant offer as this fulfiller can
// make it: without its proposer pin, since the gateway does not
// authenticate senders. The routed decision keeps the policy's whole
// decision in Extra, and a policy's failure is logged.
func TestPolicyStepDecidedEvent(t *testing.T) {
	t.Parallel()
	rig := newStepRig(t, newFakeSpace())
	offer := &decision.Grantable{MaxTTL: time.Hour, Scope: []decision.GrantField{{Path: "proposer"}, {Path: "tool"}}}
	policy := decision.Decision{Action: decision.Escalate, Approvers: []string{"alice"}, Quorum: 1, Message: "check it",
		Editable: []string{"a"}, Grantable: offer, Revision: "sha256:r2", Err: nil}
	step := rig.step(decideOnly(policy), nil, nil)
	p := stepProposal("p2", addCall, "calculator")
	got := decideLogged(context.Background(), step, lifecycle.Decide{ID: "p2", Proposal: p, Pending: 1})

	evs := rig.obs.of(StageDecided)
	if len(evs) != 1 {
		t.Fatalf("%d decided events, want 1", len(evs))
	}
	ev := evs[0]
	if ev.ProposalID != "p2" || ev.DecisionID != "dec-p2" || ev.Revision != "sha256:r2" || ev.Proposer != "coder" ||
		ev.Method != "tools/call" || ev.Tool != "add" || ev.Target != "calculator" || ev.GrantID != "" {
		t.Errorf("decided event %+v", ev)
	}
	if ev.Decision == nil || len(ev.Decision.Grantable.Scope) != 2 || ev.Decision.Grantable.Scope[0].Path != "proposer" {
		t.Errorf("logged decision %+v, want the policy's own offer (proposer pinned)", ev.Decision)
	}
	if ev.Input == nil || ev.Input.Tool == nil || ev.Input.Tool.Server != "calculator" || ev.Input.Approval != nil {
		t.Errorf("logged input %+v", ev.Input)
	}
	d := got.Decision
	if d.Action != lifecycle.Escalate || d.Target != "calculator" || d.Timeout != 0 || d.Quorum != 1 ||
		len(d.Approvers) != 1 || d.Approvers[0] != "alice" || d.Message != "check it" || d.Revision != "sha256:r2" {
		t.Errorf("decided %+v", d)
	}
	sd := extraOf(t, d)
	if sd.Grantable == nil || len(sd.Grantable.Scope) != 1 || sd.Grantable.Scope[0].Path != "tool" ||
		len(sd.Editable) != 1 || sd.Route != "calculator" || sd.DeadlineByProposer {
		t.Errorf("kept decision %+v, want the offer without the proposer pin, routed to calculator", sd)
	}

	// A policy that fails closed is logged, and its reject acted on.
	failed := decision.Decision{Action: decision.Reject, Reason: decision.ReasonPolicy,
		Message: "the policy could not decide this proposal", Err: context.DeadlineExceeded}
	step = rig.step(decideOnly(failed), nil, nil)
	got = decideLogged(context.Background(), step, lifecycle.Decide{ID: "p3", Proposal: stepProposal("p3", addCall)})
	if got.Decision.Action != lifecycle.Reject || got.Decision.Reason != "policy" || got.Decision.Message != failed.Message || got.Incapable != "" {
		t.Errorf("decided %+v", got)
	}
	if !strings.Contains(rig.logs.String(), `msg="policy failed closed" proposal=p3 err="context deadline exceeded"`) {
		t.Errorf("log %q, want the policy's failure", rig.logs.String())
	}
}

// Routing: a fulfil or an escalation that nobody can carry out comes
// back with why (rejected "incapable" by the core), before any human is
// asked; a reject is not routed.
func TestPolicyStepRoutingIncapable(t *testing.T) {
	t.Parallel()
	space := newFakeSpace()
	space.tools["other-ful"] = []ToolInfo{{Name: "mul"}}
	space.tools["calculator"] = append(space.tools["calculator"], ToolInfo{Name: "mul"})
	space.roster["printer"] = agent.Participant{ID: "printer"}
	space.tools["printer"] = []ToolInfo{{Name: "add"}}
	rig := newStepRig(t, space)
	for _, c := range []struct {
		name, payload string
		to            []string
		action        decision.Action
		target        string // the decision's
		incapable     string
		route         string
	}{
		{"nobody offers it", `{"method":"tools/call","params":{"name":"nope","arguments":{}}}`, nil, decision.Fulfill, "",
			`no participant in the space offers tool "nope"`, ""},
		{"escalate, nobody offers it", `{"method":"tools/call","params":{"name":"nope","arguments":{}}}`, nil, decision.Escalate, "",
			`no participant in the space offers tool "nope"`, ""},
		{"two owners", `{"method":"tools/call","params":{"name":"mul","arguments":{}}}`, nil, decision.Fulfill, "",
			`tool "mul" is offered by [calculator other-ful]; address the proposal to one of them`, ""},
		{"addressed to one of two", `{"method":"tools/call","params":{"name":"mul","arguments":{}}}`, []string{"other-ful"}, decision.Fulfill, "",
			"", "other-ful"},
		{"the policy's target is away", addCall, nil, decision.Fulfill, "scanner", "scanner is not in the space", ""},
		{"the policy's target", addCall, nil, decision.Fulfill, "printer", "", "printer"},
		// An owner whose tools/list is known and does not list the tool
		// would answer "Tool not found": nothing is sent (issue 41, row 14).
		{"addressed to an owner that does not list it", `{"method":"tools/call","params":{"name":"nope","arguments":{}}}`, []string{"calculator"}, decision.Fulfill, "",
			`calculator does not offer tool "nope" (it is not in its tools/list)`, ""},
		{"the policy's target does not list it", `{"method":"tools/call","params":{"name":"nope","arguments":{}}}`, nil, decision.Escalate, "calculator",
			`calculator does not offer tool "nope" (it is not in its tools/list)`, ""},
		{"not a tool call, nobody named", `{"method":"resources/read","params":{"uri":"x"}}`, nil, decision.Fulfill, "",
			"no participant to send resources/read to; address the proposal to one", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			step := rig.step(decideOnly(decision.Decision{Action: c.action, Target: c.target, Revision: "r"}), nil, nil)
			got := decideLogged(context.Background(), step, lifecycle.Decide{ID: "p", Proposal: stepProposal("p", c.payload, c.to...)})
			if got.Incapable != c.incapable || got.Decision.Target != c.route || got.Decision.Action != lifecycle.Action(c.action) {
				t.Errorf("decided %+v, want incapable %q, route %q", got, c.incapable, c.route)
			}
		})
	}

	// An owner whose tools/list is not known (it answers none, as a
	// participant built on the reference SDK may not) is asked, as before.
	quiet := newFakeSpace()
	quiet.roster["bridge"] = agent.Participant{ID: "bridge"}
	quiet.noList = map[string]bool{"bridge": true}
	step0 := newStepRig(t, quiet).step(decideOnly(decision.Decision{Action: decision.Fulfill, Revision: "r"}), nil, nil)
	got0 := decideLogged(context.Background(), step0, lifecycle.Decide{ID: "p", Proposal: stepProposal("p", `{"method":"tools/call","params":{"name":"nope","arguments":{}}}`, "bridge")})
	if got0.Incapable != "" || got0.Decision.Target != "bridge" {
		t.Errorf("decided %+v, want it routed to bridge, whose tools are not known", got0)
	}

	// Without the capability to send the request, nobody can.
	space.caps = []agent.Capability{{Kind: "mcp/request", Payload: json.RawMessage(`{"method":"tools/list"}`)}}
	step := rig.step(decideOnly(decision.Decision{Action: decision.Fulfill}), nil, nil)
	got := decideLogged(context.Background(), step, lifecycle.Decide{ID: "p", Proposal: stepProposal("p", addCall, "calculator")})
	if got.Incapable != "fulfiller's capabilities do not allow mcp/request tools/call" {
		t.Errorf("decided %+v", got)
	}

	// A reject is not routed (nor said incapable).
	step = rig.step(decideOnly(decision.Decision{Action: decision.Reject, Reason: "unsafe", Message: "no"}), nil, nil)
	got = decideLogged(context.Background(), step, lifecycle.Decide{ID: "p", Proposal: stepProposal("p", `{"method":"tools/call","params":{"name":"nope"}}`)})
	if got.Incapable != "" || got.Decision.Action != lifecycle.Reject || got.Decision.Reason != "unsafe" || got.Decision.Message != "no" {
		t.Errorf("decided %+v", got)
	}
}

// The task choice: a tool that requires tasks is called as one, one that
// allows them when the decision asks, one that forbids them (or says
// nothing) never; a task's timeout is the decision's, else the
// configured one.
func TestPolicyStepTaskChoice(t *testing.T) {
	t.Parallel()
	space := newFakeSpace()
	space.tools["calculator"] = []ToolInfo{
		{Name: "must", Execution: json.RawMessage(`{"taskSupport":"required"}`)},
		{Name: "may", Execution: json.RawMessage(`{"taskSupport":"optional"}`)},
		{Name: "never", Execution: json.RawMessage(`{"taskSupport":"forbidden"}`)},
		{Name: "plain"},
	}
	rig := newStepRig(t, space)
	for _, c := range []struct {
		tool     string
		ask      bool
		timeout  time.Duration
		task     bool
		deadline time.Duration
	}{
		{"must", false, 0, true, time.Hour},
		{"must", false, 10 * time.Minute, true, 10 * time.Minute},
		{"may", true, 0, true, time.Hour},
		{"may", false, 0, false, 0},
		{"never", true, 0, false, 0},
		{"plain", true, 0, false, 0},
	} {
		step := rig.step(decideOnly(decision.Decision{Action: decision.Fulfill, Task: c.ask, TaskTimeout: c.timeout}), nil, nil)
		got := decideLogged(context.Background(), step, lifecycle.Decide{ID: "p",
			Proposal: stepProposal("p", `{"method":"tools/call","params":{"name":"`+c.tool+`","arguments":{}}}`)})
		if got.Decision.Task != c.task || (c.task && got.Decision.TaskTimeout != c.deadline) || got.Decision.Target != "calculator" {
			t.Errorf("%s (decision task %v, timeout %s): decided %+v, want task %v, timeout %s", c.tool, c.ask, c.timeout, got.Decision, c.task, c.deadline)
		}
		if sd := extraOf(t, got.Decision); sd.Task != c.ask {
			t.Errorf("%s: kept decision's task %v, want the policy's %v", c.tool, sd.Task, c.ask)
		}
	}
}

// The proposer's deadline hint: sooner than the policy's timeout, it is
// the approval deadline (the time left until it, marked as the
// proposer's); too soon to ask anyone, the proposal is rejected
// "timeout"; later than the timeout, it changes nothing.
func TestPolicyStepDeadlineHint(t *testing.T) {
	t.Parallel()
	rig := newStepRig(t, newFakeSpace())
	esc := decision.Decision{Action: decision.Escalate, Timeout: 5 * time.Minute, Revision: "sha256:r3"}
	step := rig.step(decideOnly(esc), nil, nil)
	call := func(meta string) lifecycle.Decided {
		p := stepProposal("p", `{"method":"tools/call","params":{"name":"add","arguments":{"a":1},"_meta":`+meta+`}}`)
		return decideLogged(context.Background(), step, lifecycle.Decide{ID: "p", Proposal: p})
	}
	rig.clock.Advance(10 * time.Second) // the proposal arrived at stepEpoch; now is 10 s later

	got := call(`{"timeout_ms":60000}`)
	if got.Decision.Action != lifecycle.Escalate || got.Decision.Timeout != 50*time.Second || got.Incapable != "" {
		t.Errorf("60 s hint: decided %+v, want an escalation for the 50 s left", got)
	}
	if sd := extraOf(t, got.Decision); !sd.DeadlineByProposer || sd.Timeout != 50*time.Second {
		t.Errorf("60 s hint: kept decision %+v, want the deadline marked as the proposer's", sd)
	}

	got = call(`{"deadline":"2026-03-01T12:00:11Z"}`)
	if got.Decision.Action != lifecycle.Reject || got.Decision.Reason != "timeout" || got.Decision.Revision != "sha256:r3" ||
		got.Decision.Message != "the proposal's own deadline (2026-03-01T12:00:11Z) leaves no time to ask a human" {
		t.Errorf("hint 1 s away: decided %+v", got)
	}

	got = call(`{"timeout_ms":3600000}`)
	if got.Decision.Action != lifecycle.Escalate || got.Decision.Timeout != 5*time.Minute {
		t.Errorf("hint past the timeout: decided %+v, want the policy's 5m", got)
	}
	if sd := extraOf(t, got.Decision); sd.DeadlineByProposer {
		t.Errorf("hint past the timeout: kept decision %+v marked as the proposer's", sd)
	}

	// With no timeout in the decision, the configured one is what the
	// hint is compared with.
	step = rig.step(decideOnly(decision.Decision{Action: decision.Escalate}), nil, nil)
	if got := call(`{"timeout_ms":400000}`); got.Decision.Timeout != 0 || extraOf(t, got.Decision).DeadlineByProposer {
		t.Errorf("hint past the configured timeout: decided %+v", got.Decision)
	}
	if got := call(`{"timeout_ms":200000}`); got.Decision.Timeout != 190*time.Second || !extraOf(t, got.Decision).DeadlineByProposer {
		t.Errorf("hint before the configured timeout: decided %+v", got.Decision)
	}
}

// Without Config.Approvals, a decision to escalate is rejected "policy" with
// today's message; one nobody could carry out is still "incapable".
func TestPolicyStepEscalationNotConfigured(t *testing.T) {
	t.Parallel()
	rig := newStepRig(t, newFakeSpace())
	rig.cfg.Escalation = false
	step := rig.step(decideOnly(decision.Decision{Action: decision.Escalate, Revision: "sha256:r4"}), nil, nil)
	got := decideLogged(context.Background(), step, lifecycle.Decide{ID: "p", Proposal: stepProposal("p", addCall)})
	if got.Decision.Action != lifecycle.Reject || got.Decision.Reason != "policy" || got.Decision.Revision != "sha256:r4" ||
		got.Decision.Message != "the policy asks for human approval, but escalation is not configured on this fulfiller" || got.Incapable != "" {
		t.Errorf("decided %+v", got)
	}
	got = decideLogged(context.Background(), step, lifecycle.Decide{ID: "p", Proposal: stepProposal("p", `{"method":"tools/call","params":{"name":"nope"}}`)})
	if got.Incapable != `no participant in the space offers tool "nope"` {
		t.Errorf("decided %+v", got)
	}
}

// The re-check of an edited call (rule 7): the policy sees the edited
// params and the approval (who approved, the last approval's form
// content); the decision goes to the route the escalation had, unless it
// names another; its decided event is a new decision's.
func TestPolicyStepRecheck(t *testing.T) {
	t.Parallel()
	rig := newStepRig(t, newFakeSpace())
	var seen *policies.Input
	dec := decideFunc(func(_ context.Context, in *policies.Input) decision.Decision {
		seen = in
		return decision.Decision{Action: decision.Fulfill, Revision: "sha256:r5"}
	})
	step := rig.step(dec, nil, nil)
	p := stepProposal("p9", addCall)
	p.Phase = lifecycle.AwaitingApproval
	escalated := coreDecision(decision.Decision{Action: decision.Escalate, Quorum: 2, Revision: "sha256:r4"}, "calculator", false)
	p.Decision = &escalated
	edit := json.RawMessage(`{"name":"add","arguments":{"a":1,"b":5}}`)
	approvals := []lifecycle.Approval{
		{Approver: "alice", Content: json.RawMessage(`{"approve":true}`)},
		{Approver: "bob", Params: edit, Content: json.RawMessage(`{"approve":true,"b":5}`)},
	}
	got := decideLogged(context.Background(), step, lifecycle.Decide{ID: "p9", Again: true, Params: edit, Approvals: approvals, Proposal: p, Pending: 2})

	if a := seen.Approval; a == nil || strings.Join(a.By, ",") != "alice,bob" || string(a.Content) != `{"approve":true,"b":5}` {
		t.Errorf("input.approval = %+v, want by alice and bob, bob's content", a)
	}
	if string(seen.Params) != string(edit) || string(seen.Tool.Arguments) != `{"a":1,"b":5}` || seen.Tool.Server != "calculator" ||
		string(seen.Proposal) != string(p.Envelope) || seen.Agent.Pending != 2 {
		t.Errorf("input params %s, tool %+v", seen.Params, seen.Tool)
	}
	if !got.Again || got.ID != "p9" || got.Incapable != "" || got.Decision.Action != lifecycle.Fulfill ||
		got.Decision.Target != "calculator" || got.Decision.Revision != "sha256:r5" {
		t.Errorf("decided %+v", got)
	}
	evs := rig.obs.of(StageDecided)
	if len(evs) != 1 {
		t.Fatalf("%d decided events, want 1", len(evs))
	}
	ev := evs[0]
	if ev.DecisionID == "" || ev.DecisionID == p.DecisionID || ev.Revision != "sha256:r5" || ev.Target != "calculator" ||
		ev.Input != seen || ev.Latency != 0 || ev.GrantID != "" || ev.ProposalID != "p9" || ev.Tool != "add" {
		t.Errorf("decided event %+v, want a new decision's", ev)
	}

	// A target the new decision names is the route; a reject is passed
	// on as it is (the core answers it).
	step = rig.step(decideOnly(decision.Decision{Action: decision.Fulfill, Target: "other-ful"}), nil, nil)
	if got := decideLogged(context.Background(), step, lifecycle.Decide{ID: "p9", Again: true, Params: edit, Approvals: approvals, Proposal: p}); got.Decision.Target != "other-ful" {
		t.Errorf("decided %+v, want other-ful", got)
	}
	step = rig.step(decideOnly(decision.Decision{Action: decision.Reject, Reason: "unsafe", Message: "b too big"}), nil, nil)
	got = decideLogged(context.Background(), step, lifecycle.Decide{ID: "p9", Again: true, Params: edit, Approvals: approvals, Proposal: p})
	if !got.Again || got.Decision.Action != lifecycle.Reject || got.Decision.Reason != "unsafe" || got.Decision.Message != "b too big" {
		t.Errorf("decided %+v", got)
	}
}

// The shadow policy gets each live decision with its input, off the
// live path, and its answer is an event governed by the live decision;
// a full queue drops the job, counted.
func TestPolicyStepShadow(t *testing.T) {
	t.Parallel()
	rig := newStepRig(t, newFakeSpace())
	shadowIn := make(chan *policies.Input, 4)
	shadowDec := decideFunc(func(_ context.Context, in *policies.Input) decision.Decision {
		shadowIn <- in
		return decision.Decision{Action: decision.Reject, Reason: "policy"}
	})
	shadows := newShadowing(shadowDec, time.Second, 1)
	step := rig.step(decideOnly(decision.Decision{Action: decision.Fulfill, Revision: "sha256:r6"}), shadows, nil)

	// Not running yet: the first job waits in the queue, the second is
	// dropped.
	decideLogged(context.Background(), step, lifecycle.Decide{ID: "p1", Proposal: stepProposal("p1", addCall)})
	decideLogged(context.Background(), step, lifecycle.Decide{ID: "p2", Proposal: stepProposal("p2", addCall)})
	dropped := rig.obs.of(StageShadow)
	if len(dropped) != 1 || dropped[0].ProposalID != "p2" || dropped[0].Shadow == nil || !dropped[0].Shadow.Dropped ||
		dropped[0].Shadow.Live != decision.Fulfill || dropped[0].DecisionID != "dec-p2" {
		t.Fatalf("shadow events %+v, want p2's dropped", dropped)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		step.runShadow(ctx)
	}()
	defer func() { cancel(); <-done }()
	in := <-shadowIn
	waitFor(t, func() bool { return len(rig.obs.of(StageShadow)) == 2 })
	decided := rig.obs.of(StageDecided)[0]
	if in != decided.Input {
		t.Errorf("the shadow saw another input than the live policy")
	}
	ev := rig.obs.of(StageShadow)[1]
	if ev.ProposalID != "p1" || ev.DecisionID != "dec-p1" || ev.Revision != "sha256:r6" || ev.Proposer != "coder" || ev.Tool != "add" ||
		ev.Shadow == nil || ev.Shadow.Dropped || ev.Shadow.Agrees || ev.Shadow.Live != decision.Fulfill || ev.Shadow.Decision.Action != decision.Reject {
		t.Errorf("shadow event %+v", ev)
	}
}

// Evaluations are bounded to DecideWorkers at once: the Loop decides
// each proposal on a goroutine of its own.
func TestPolicyStepBoundsEvaluations(t *testing.T) {
	t.Parallel()
	rig := newStepRig(t, newFakeSpace())
	rig.cfg.DecideWorkers = 1
	dec := &fakeDecider{decisions: fulfilAdd, gate: make(chan struct{})}
	step := rig.step(dec, nil, nil)
	results := make(chan lifecycle.Decided, 2)
	for _, id := range []string{"p1", "p2"} {
		go func() {
			results <- decideLogged(context.Background(), step, lifecycle.Decide{ID: id, Proposal: stepProposal(id, addCall)})
		}()
	}
	waitFor(t, func() bool { return dec.count() == 1 })
	select {
	case r := <-results:
		t.Fatalf("decided %+v with the only evaluation slot held", r)
	case <-time.After(50 * time.Millisecond):
	}
	if n := dec.count(); n != 1 {
		t.Fatalf("%d evaluations at once, want 1", n)
	}
	// One whose Loop stops while it waits for a slot is not evaluated
	// (nor logged): its answer is dropped, and it fails closed.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if r := decideLogged(ctx, step, lifecycle.Decide{ID: "p3", Proposal: stepProposal("p3", addCall)}); r.ID != "p3" || r.Decision.Action != lifecycle.Reject {
		t.Errorf("decided %+v after the Loop stopped, want a reject", r)
	}
	close(dec.gate)
	for range 2 {
		if r := <-results; r.Decision.Action != lifecycle.Fulfill {
			t.Errorf("decided %+v", r)
		}
	}
	if n, logged := dec.count(), len(rig.obs.of(StageDecided)); n != 2 || logged != 2 {
		t.Errorf("%d evaluations and %d decided events, want 2 of each", n, logged)
	}
}

// A decision waits for the grants in the store to be loaded (at most
// grantsLoadWait): one read in the first moments after a restart sees
// the grant that covers it, instead of asking a human again.
func TestPolicyStepWaitsForStoredGrants(t *testing.T) {
	t.Parallel()
	store, reg := runSlowGrants(t)

	rig := newStepRig(t, newFakeSpace())
	// The registry expires grants on the wall clock: a grant made at
	// stepEpoch (in the past) is swept soon after it is loaded, and the
	// decision then sees none. The step's clock and the grant are now.
	now := time.Now().UTC().Truncate(time.Second)
	rig.clock = clocktest.New(now)
	dec := &fakeDecider{decisions: fulfilAdd}
	step := rig.step(dec, nil, reg)
	result := make(chan lifecycle.Decided, 1)
	go func() {
		result <- decideLogged(context.Background(), step, lifecycle.Decide{ID: "p1", Proposal: stepProposal("p1", addCall)})
	}()
	select {
	case r := <-result:
		t.Fatalf("decided %+v before the grants were loaded", r)
	case <-time.After(50 * time.Millisecond):
	}

	store.load(t, now)
	if r := <-result; r.Decision.Action != lifecycle.Fulfill {
		t.Errorf("decided %+v", r)
	}
	dec.mu.Lock()
	in := dec.inputs[0]
	dec.mu.Unlock()
	if len(in.Grants) != 1 || !strings.Contains(string(in.Grants[0]), `"id":"g-1"`) {
		t.Fatalf("input.grants = %s, want the stored grant g-1", in.Grants)
	}
}

// decideLogged is step.Decide with its decision's record told to the
// observers, as the journal does once the core logs the decided line.
func decideLogged(ctx context.Context, step *policyStep, d lifecycle.Decide) lifecycle.Decided {
	out := step.Decide(ctx, d)
	if n, ok := out.Note.(*decidedNote); ok {
		n.log()
	}
	return out
}
