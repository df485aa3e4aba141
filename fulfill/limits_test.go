package fulfill_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/space"
	"github.com/mewkit/fulfiller/internal/spacetest"
	"github.com/mewkit/fulfiller/internal/toolserver"
	"github.com/mewkit/fulfiller/policies"
)

// limitsPolicy fulfils add; rejects "deep" as unsafe only after looking
// into its (deeply nested) arguments; and for "spin" and "walk" does work
// no evaluation timeout lets finish.
const limitsPolicy = `package fulfiller

default decision := {"action": "reject", "reason": "policy", "message": "not allowed"}

decision := {"action": "fulfill"} if input.tool.name == "add"

decision := {"action": "reject", "reason": "unsafe", "message": "too deep"} if {
	input.tool.name == "deep"
	is_array(input.params.arguments.x)
}

decision := {"action": "fulfill"} if {
	input.tool.name == "spin"
	count(numbers.range(1, 1e10)) > 0
}

decision := {"action": "fulfill"} if {
	input.tool.name == "walk"
	count([p | walk(input.params, [p, _])]) < 0
}
`

// limitsWorld is the e2e world with the two knobs the limits need: the
// fulfiller's read limit (--max-frame) and the policy timeout
// (--policy-timeout). It also keeps the fulfiller's agent for its stats
// and records every decision.
type limitsWorld struct {
	*world
	agent *agent.Client

	mu        sync.Mutex
	decisions map[string]decision.Decision
}

func newLimitsWorld(t *testing.T, maxFrame int64, policyTimeout time.Duration) *limitsWorld {
	t.Helper()
	srv, err := space.New(space.Config{Tokens: map[string][]agent.Capability{
		"fulfiller-token": capsFulfiller,
		"coder-token":     capsProposer,
		"calc-token":      capsTool,
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	lw := &limitsWorld{world: &world{t: t, srv: srv, wire: spacetest.RecordWire(t, srv)}, decisions: map[string]decision.Decision{}}
	ctx := context.Background()
	tools := toolserver.Calculator()
	spacetest.ServeTools(t, spacetest.Join(t, ctx, srv, "calculator", "calc-token"), tools...)

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "policy.rego"), []byte(limitsPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	engine, err := policies.Load(ctx, policies.Options{Policies: []string{dir}, Timeout: policyTimeout})
	if err != nil {
		t.Fatal(err)
	}
	lw.gate = &gatedDecider{engine: engine, gate: make(chan struct{})}

	fc, err := agent.Dial(ctx, agent.Config{URL: srv.URL(), ID: "fulfiller", Token: "fulfiller-token", MaxFrame: maxFrame})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fc.Close() })
	lw.agent = fc
	lw.ful = fulfill.New(fc, lw.gate, fulfill.Config{SpaceID: space.DefaultSpaceID, Observer: fulfill.ObserverFunc(func(e fulfill.Event) {
		if e.Stage == fulfill.StageDecided && e.Decision != nil {
			lw.mu.Lock()
			lw.decisions[e.ProposalID] = *e.Decision
			lw.mu.Unlock()
		}
	})})
	fulSub := fc.Subscribe(agent.SubscribeOptions{All: true})
	fctx, fcancel := context.WithCancel(ctx)
	lw.stopFul, lw.fulDone = fcancel, make(chan struct{})
	go func() { defer close(lw.fulDone); _ = lw.ful.Run(fctx, fulSub.C()) }()
	t.Cleanup(lw.stopFulfiller)
	t.Cleanup(lw.gate.open)
	poll.Until(t, "tool discovery", func() bool { return len(lw.ful.Tools()) == len(tools) })

	lw.coder = spacetest.Join(t, ctx, srv, "coder", "coder-token")
	lw.prop = spacetest.NewProposer(t, lw.coder)
	return lw
}

func (lw *limitsWorld) decision(id string) decision.Decision {
	lw.t.Helper()
	var d decision.Decision
	var ok bool
	poll.Until(lw.t, "the decision of "+id, func() bool {
		lw.mu.Lock()
		defer lw.mu.Unlock()
		d, ok = lw.decisions[id]
		return ok
	})
	return d
}

// An oversized proposal is discarded unread by the fulfiller's agent
// (docs/design.md rule 6): it is never answered, the session survives it, and the
// normal proposal behind it is decided and fulfilled.
func TestOversizedProposalIsNeverAnsweredAndSessionSurvives(t *testing.T) {
	t.Parallel()
	const maxFrame = 16 << 10
	lw := newLimitsWorld(t, maxFrame, time.Minute)

	big := lw.propose("p-big", `{"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2,"pad":"`+strings.Repeat("x", 2*maxFrame)+`"}}}`)
	normal := lw.propose("p-normal", `{"method":"tools/call","params":{"name":"add","arguments":{"a":2,"b":3}}}`)

	if out := lw.outcome(normal); !out.Fulfilled {
		t.Fatalf("the proposal after the oversized one: %+v, want fulfilled", out)
	}
	// Frames reach the agent in order, so by now the big one was read.
	if got := lw.answers(big); len(got) != 0 {
		t.Fatalf("the oversized proposal was answered: %+v", got)
	}
	if _, pending := lw.ful.Get(big); pending {
		t.Fatal("the oversized proposal is pending")
	}
	st := lw.agent.Stats()
	if st.Oversized != 1 || st.SessionsLost != 0 || !lw.agent.Connected() {
		t.Fatalf("agent stats %+v connected=%v: want 1 oversized frame and the session kept", st, lw.agent.Connected())
	}
}

// A proposal nested almost as deep as the JSON limit allows (10 000 levels
// counting the envelope) passes the agent and the space and is decided by
// the policy from its contents, not failed closed.
func TestProposalNestedToTheDepthLimitIsDecided(t *testing.T) {
	t.Parallel()
	lw := newLimitsWorld(t, 0, time.Second)
	const depth = 9990 // + envelope, payload, params, arguments = 9994
	id := lw.propose("p-deep", `{"method":"tools/call","params":{"name":"deep","arguments":{"x":`+nested(depth)+`}}}`)
	out := lw.outcome(id)
	if !out.Rejected || out.Reason != "unsafe" {
		t.Fatalf("deep proposal: %+v, want the policy's own reject unsafe", out)
	}
	if d := lw.decision(id); d.Err != nil {
		t.Fatalf("decision failed: %v", d.Err)
	}
}

// A policy that cannot finish is cut by the evaluation timeout, tried
// once more and, cut again, fails closed as reject "busy" on the wire
// (load is not a policy verdict: issue 41, row 13); the fulfiller keeps
// deciding.
func TestRunawayPolicyRejectsBusyAndKeepsDeciding(t *testing.T) {
	t.Parallel()
	lw := newLimitsWorld(t, 0, 100*time.Millisecond)
	for _, tc := range []struct{ id, payload string }{
		{"p-spin", `{"method":"tools/call","params":{"name":"spin","arguments":{}}}`},
		// walk emits every path of a 5 000-deep structure: quadratic work.
		{"p-walk", `{"method":"tools/call","params":{"name":"walk","arguments":{"x":` + nested(5000) + `}}}`},
	} {
		id := lw.propose(tc.id, tc.payload)
		out := lw.outcome(id)
		if !out.Rejected || out.Reason != decision.ReasonBusy {
			t.Fatalf("%s: %+v, want reject busy", tc.id, out)
		}
		if d := lw.decision(id); !errors.Is(d.Err, policies.ErrEvalTimeout) || !d.Retried {
			t.Fatalf("%s: decision error %v, want the evaluation timeout", tc.id, d.Err)
		}
		next := lw.propose(tc.id+"-next", `{"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":1}}}`)
		if out := lw.outcome(next); !out.Fulfilled {
			t.Fatalf("after %s: %+v, want fulfilled", tc.id, out)
		}
	}
}

// nested returns n nested JSON arrays around 0.
func nested(n int) string {
	return strings.Repeat("[", n) + "0" + strings.Repeat("]", n)
}
