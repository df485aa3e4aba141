//go:build unix

package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/internal/logbuf"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/space"
	"github.com/mewkit/fulfiller/internal/spacetest"
	"github.com/mewkit/fulfiller/internal/toolserver"
)

// restartPolicy fulfils "done", "hang" and "slow" at once, escalates "ask" (30 s
// deadline) and "quick" (2 s deadline) to alice and rejects "deny".
const restartPolicy = `package fulfiller

decision := {"action": "fulfill"} if input.tool.name in {"done", "hang", "slow"}

decision := {"action": "escalate", "approvers": ["alice"], "timeout": "30s", "message": "may coder do it?"} if input.tool.name == "ask"

decision := {"action": "escalate", "approvers": ["alice"], "timeout": "2s", "message": "quick?"} if input.tool.name == "quick"

decision := {"action": "reject", "reason": "policy", "message": "never"} if input.tool.name == "deny"
`

// stateWorld is a space with a proposer (coder), a human (alice) who
// answers by hand, and a tool owner (fs) that counts the calls it ran.
// Its tool "slow" answers a call only when the test releases the call's
// arguments.gate (release), so that a call is in flight for as long as a
// test needs.
type stateWorld struct {
	ctx    context.Context
	srv    *space.Server
	wire   *spacetest.Wire
	policy string
	calls  map[string]*atomic.Int32
	alice  *agent.Client
	logs   lockedBuffer
	t      *testing.T

	gateMu sync.Mutex
	gates  map[string]chan struct{}
}

// gate is the channel the "slow" call with arguments.gate name waits on.
func (w *stateWorld) gate(name string) chan struct{} {
	w.gateMu.Lock()
	defer w.gateMu.Unlock()
	if w.gates == nil {
		w.gates = map[string]chan struct{}{}
	}
	if w.gates[name] == nil {
		w.gates[name] = make(chan struct{})
	}
	return w.gates[name]
}

// release lets the "slow" calls with arguments.gate name answer.
func (w *stateWorld) release(name string) { close(w.gate(name)) }

// lockedBuffer is a log sink safe to read while it is written.
type lockedBuffer = logbuf.Buffer

func newStateWorld(t *testing.T) *stateWorld {
	t.Helper()
	srv, policy := newBinarySpace(t, restartPolicy)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	w := &stateWorld{ctx: ctx, srv: srv, wire: spacetest.RecordWire(t, srv), policy: policy, calls: map[string]*atomic.Int32{}, t: t}
	var tools []toolserver.Tool
	for _, name := range []string{"done", "hang", "ask", "quick", "deny", "slow"} {
		n := &atomic.Int32{}
		w.calls[name] = n
		tools = append(tools, toolserver.Tool{Name: name, InputSchema: map[string]any{"type": "object"},
			Call: func(ctx context.Context, args json.RawMessage) (string, error) {
				n.Add(1)
				switch name {
				case "hang":
					<-ctx.Done()
				case "slow":
					var a struct{ Gate string }
					_ = json.Unmarshal(args, &a)
					select {
					case <-w.gate(a.Gate):
					case <-ctx.Done():
					}
				}
				return name + " ran", nil
			}})
	}
	spacetest.ServeTools(t, spacetest.Join(t, ctx, srv, "fs", "human-token"), tools...)
	w.alice = spacetest.Join(t, ctx, srv, "alice", "human-token")
	return w
}

// start runs `fulfiller run` as member id on the given --state, with a
// short fulfil timeout and lease (and a generous --policy-timeout, as
// humanWorld.runFulfiller).
func (w *stateWorld) start(bin, id, state string, extra ...string) *os.Process {
	w.t.Helper()
	args := append([]string{"run", "--gateway", w.srv.URL(), "--id", id, "--policy", w.policy, "--approvers", "alice",
		"--state", state, "--fulfill-timeout", "6s", "--log-format", "json", "--policy-timeout", "1m"}, extra...)
	cmd := exec.CommandContext(w.ctx, bin, args...)
	cmd.Env = append(os.Environ(), "FULFILLER_TOKEN=fulfiller-token")
	cmd.Stderr = &w.logs
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd.Process
}

func (w *stateWorld) propose(prop interface {
	Propose(context.Context, string, []string, json.RawMessage) (string, error)
}, id, tool string) {
	w.t.Helper()
	if _, err := prop.Propose(w.ctx, id, []string{"fs"}, json.RawMessage(`{"method":"tools/call","params":{"name":"`+tool+`","arguments":{}}}`)); err != nil {
		w.t.Fatal(err)
	}
}

// elicitationFor waits for the n-th (1-based) elicitation about proposal.
func (w *stateWorld) elicitationFor(proposal string, n int) agent.Envelope {
	w.t.Helper()
	seen := 0
	return w.wire.WaitFor(w.t, "elicitation "+proposal, func(env agent.Envelope) bool {
		if env.Kind != agent.KindRequest || !strings.Contains(string(env.Payload), `"elicitation/create"`) || !strings.Contains(string(env.Payload), proposal) {
			return false
		}
		seen++
		return seen == n
	})
}

// answersTo lists what the fulfillers sent that answers proposal.
func (w *stateWorld) answersTo(proposal string) []agent.Envelope {
	var out []agent.Envelope
	for _, env := range w.wire.Envelopes() {
		if env.From != "coder" && env.From != "fs" && env.From != "alice" && env.CorrelationID.First() == proposal &&
			(env.Kind == agent.KindReject || (env.Kind == agent.KindRequest && strings.Contains(string(env.Payload), `"tools/call"`))) {
			out = append(out, env)
		}
	}
	return out
}

func (w *stateWorld) accept(elicitation agent.Envelope) {
	w.t.Helper()
	var req agent.RPCRequest
	if err := json.Unmarshal(elicitation.Payload, &req); err != nil {
		w.t.Fatal(err)
	}
	payload := `{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":{"action":"accept","content":{"approve":true}}}`
	if _, err := w.alice.Send(w.ctx, agent.Envelope{To: []string{elicitation.From}, Kind: agent.KindResponse,
		CorrelationID: agent.CorrelationIDs{elicitation.ID}, Payload: json.RawMessage(payload)}); err != nil {
		w.t.Fatal(err)
	}
}

// TestRunResumesAfterSIGKILL is issue 14's crash test, run as an operator
// would: the built binary on a DIR store, killed with SIGKILL while a 30 s
// prompt and a 2 s prompt are open and a call hangs, then started again on
// the same DIR.
func TestRunResumesAfterSIGKILL(t *testing.T) {
	t.Parallel() // the fulfiller as a process of its own: mostly waiting
	bin := fulfillerBinary(t)
	w := newStateWorld(t)
	began := time.Now()
	step := func(what string) { t.Logf("%6.1fs %s", time.Since(began).Seconds(), what) }
	dir := filepath.Join(t.TempDir(), "state")
	coder := spacetest.Join(t, w.ctx, w.srv, "coder", "coder-token")
	prop := spacetest.NewProposer(t, coder)

	step("first start")
	first := w.start(bin, "fulfiller", dir)
	poll.Until(t, "the fulfiller joined", func() bool { _, ok := coder.Participant("fulfiller"); return ok })
	w.propose(prop, "p-done", "done")
	if done, err := prop.Wait(w.ctx, "p-done"); err != nil || !done.Fulfilled {
		t.Fatalf("p-done before the crash: %+v %v, want fulfilled\n%s", done, err, w.logs.String())
	}
	w.propose(prop, "p-ask", "ask")
	asked := w.elicitationFor("p-ask", 1)
	w.propose(prop, "p-quick", "quick")
	w.elicitationFor("p-quick", 1)
	w.propose(prop, "p-hang", "hang")
	w.wire.WaitFor(t, "p-hang's tools/call", func(env agent.Envelope) bool {
		return env.Kind == agent.KindRequest && env.CorrelationID.First() == "p-hang"
	})
	step("kill")
	if err := first.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, _ = first.Wait()
	time.Sleep(2500 * time.Millisecond) // the 2 s prompt's deadline passes while nobody runs

	step("restart")
	w.start(bin, "fulfiller", dir)
	quick, err := prop.Wait(w.ctx, "p-quick")
	if err != nil || !quick.Rejected || quick.Reason != "timeout" {
		t.Fatalf("p-quick after restart: %+v %v, want reject timeout", quick, err)
	}
	step("quick rejected; waiting for re-ask")
	again := w.elicitationFor("p-ask", 2)
	if again.ID != asked.ID {
		t.Errorf("p-ask re-asked with id %s, want the same id %s", again.ID, asked.ID)
	}
	w.accept(again)
	ask, err := prop.Wait(w.ctx, "p-ask")
	if err != nil || ask.Rejected {
		t.Fatalf("p-ask after alice's accept: %+v %v, want fulfilled", ask, err)
	}
	step("ask fulfilled; waiting for hang")
	hang, err := prop.Wait(w.ctx, "p-hang")
	if err != nil || !hang.Rejected || hang.Reason != "timeout" {
		t.Fatalf("p-hang after restart: %+v %v, want reject timeout after --fulfill-timeout", hang, err)
	}
	step("replay")
	// Replaying the fulfilled proposal's id runs nothing.
	w.propose(prop, "p-done", "done")
	// The restarted process knows the id from the store's claim.
	poll.Until(t, "the replay of p-done ignored", func() bool {
		for _, line := range strings.Split(w.logs.String(), "\n") {
			if strings.Contains(line, `"msg":"proposal claimed before (a replay, or another member of the group); ignored"`) && strings.Contains(line, `"proposal":"p-done"`) {
				return true
			}
		}
		return false
	})
	for tool, want := range map[string]int32{"done": 1, "hang": 1, "ask": 1, "quick": 0} {
		if got := w.calls[tool].Load(); got != want {
			t.Errorf("%s ran %d times, want %d", tool, got, want)
		}
	}
	// Exactly one answer each: a fulfilment request, or a reject; p-hang
	// has its one request and then, past --fulfill-timeout, one reject.
	for id, want := range map[string][2]int{"p-done": {1, 0}, "p-ask": {1, 0}, "p-quick": {0, 1}, "p-hang": {1, 1}} {
		var requests, rejects int
		for _, env := range w.answersTo(id) {
			if env.Kind == agent.KindReject {
				rejects++
			} else {
				requests++
			}
		}
		if requests != want[0] || rejects != want[1] {
			t.Errorf("%s: %d tools/call and %d rejects on the wire, want %d and %d", id, requests, rejects, want[0], want[1])
		}
	}
	if t.Failed() {
		t.Logf("fulfiller logs:\n%s", w.logs.String())
	}
}
