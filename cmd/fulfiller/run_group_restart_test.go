//go:build unix

package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/spacetest"
)

// TestRunGroupRollingRestart is a rolling restart of a group of two, as an
// operator does it: SIGTERM one member, start it again, then the other.
// The member stopped holds open prompts and a call in flight; it hands
// them to the live member instead of rejecting them "other": the live
// member asks alice the same prompts again (same envelope ids), each
// answered once, awaits the response to the call already sent (never
// sending it again), and every proposal ends with exactly one answer. The
// operator API of either member lists the group's work and cancels a
// proposal the other member holds (once, from the member asked).
func TestRunGroupRollingRestart(t *testing.T) {
	t.Parallel() // the fulfillers as processes of their own: mostly waiting
	bin := fulfillerBinary(t)
	w := newStateWorld(t)
	url := startNATSServer(t, w)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("fulfiller logs:\n%s", w.logs.String())
		}
	})
	const apiToken = "rolling-restart-api-token"
	tokFile := filepath.Join(t.TempDir(), "http-token")
	if err := os.WriteFile(tokFile, []byte(apiToken), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := map[string]string{"ful-a": freeAddr(t), "ful-b": freeAddr(t)}
	start := func(id string) *os.Process {
		// The slow calls wait for the test, across a hand-over, to be
		// released: 6s of stateWorld's fulfil timeout ran out under load
		// before the adopter was asked (the call rejected "timeout").
		p := w.start(bin, id, url, "--lease", "2s", "--http", addr[id], "--http-token-file", tokFile, "--fulfill-timeout", "1m")
		poll.UntilServed(t, id+" is ready", func() bool { code, _ := httpGet(addr[id], "/readyz", ""); return code == 200 })
		return p
	}
	stop := func(id string, p *os.Process) {
		t.Helper()
		if err := p.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		st, err := p.Wait()
		if err != nil || !st.Success() {
			t.Fatalf("%s after SIGTERM: %v %v", id, st, err)
		}
	}
	// owners reads the group's pending work from member id's operator
	// API: proposal id → owner.
	owners := func(id string) map[string]string {
		code, body := httpGet(addr[id], "/v1/proposals", apiToken)
		if code != 200 {
			t.Fatalf("GET /v1/proposals on %s: %d %s", id, code, body)
		}
		var list struct {
			Proposals []struct{ ID, Owner, State string }
		}
		if err := json.Unmarshal([]byte(body), &list); err != nil {
			t.Fatalf("GET /v1/proposals on %s: %v: %s", id, err, body)
		}
		out := map[string]string{}
		for _, p := range list.Proposals {
			out[p.ID] = p.Owner
		}
		return out
	}
	coder := spacetest.Join(t, w.ctx, w.srv, "coder", "coder-token")
	prop := spacetest.NewProposer(t, coder)
	propose := func(id, tool, gate string) {
		t.Helper()
		if _, err := prop.Propose(w.ctx, id, []string{"fs"}, json.RawMessage(`{"method":"tools/call","params":{"name":"`+tool+`","arguments":{"gate":"`+gate+`"}}}`)); err != nil {
			t.Fatal(err)
		}
	}
	callSent := func(id string) agent.Envelope {
		return w.wire.WaitFor(t, id+"'s tools/call", func(env agent.Envelope) bool {
			return env.Kind == agent.KindRequest && env.CorrelationID.First() == id
		})
	}
	// handOver: member from holds asks (open prompts) and slow (a call in
	// flight); it is stopped with SIGTERM while member to is live.
	handOver := func(from string, p *os.Process, to string, asks []string, slow string) {
		t.Helper()
		asked := map[string]agent.Envelope{}
		for _, id := range asks {
			asked[id] = w.elicitationFor(id, 1)
			if asked[id].From != from {
				t.Fatalf("%s asked by %s, want %s", id, asked[id].From, from)
			}
		}
		call := callSent(slow)
		if call.From != from {
			t.Fatalf("%s's call sent by %s, want %s", slow, call.From, from)
		}
		stop(from, p)
		for _, id := range asks {
			again := w.elicitationFor(id, 2)
			if again.From != to || again.ID != asked[id].ID || !jsonEqual(again.Payload, asked[id].Payload) {
				t.Fatalf("%s asked again: %+v, want the same prompt (id %s, payload %s) from %s", id, again, asked[id].ID, asked[id].Payload, to)
			}
			w.accept(again)
		}
		// The call's response is awaited by the adopter: released once
		// the adopter holds the proposal.
		var seen map[string]string
		if !poll.Within(poll.Limit, func() bool { seen = owners(to); return seen[slow] == to }) {
			t.Fatalf("%s does not hold %s after %s: its /v1/proposals lists (id → owner) %v", to, slow, poll.Limit, seen)
		}
		w.release(slow)
		for _, id := range append(slices.Clone(asks), slow) {
			out, err := prop.Wait(w.ctx, id)
			want := to
			if id == slow {
				want = from // its request went out before the handover
			}
			if err != nil || !out.Fulfilled || out.FulfilledBy != want || out.Rejected {
				t.Fatalf("%s: %+v %v, want fulfilled by %s", id, out, err, want)
			}
			// The proposer has its answer; the adopter ends the
			// proposal once it has read the response too.
			poll.Until(t, to+" ends "+id, func() bool { _, held := owners(to)[id]; return !held })
		}
	}

	a := start("ful-a")
	propose("p1-ask", "ask", "")
	propose("p1-two", "ask", "")
	propose("p1-cancel", "ask", "")
	propose("p1-slow", "slow", "p1-slow")
	w.elicitationFor("p1-cancel", 1)
	// A has recorded all four before B is asked about them: p1-slow,
	// proposed last, can otherwise still be on its way to A's store
	// (seen on a loaded machine: B listed it owned by "").
	poll.Until(t, "ful-a holds the four proposals", func() bool {
		got := owners("ful-a")
		return got["p1-ask"] == "ful-a" && got["p1-two"] == "ful-a" && got["p1-cancel"] == "ful-a" && got["p1-slow"] == "ful-a"
	})
	b := start("ful-b")

	// Either member's operator API lists the group's work and cancels
	// it: B cancels a proposal A holds.
	got := owners("ful-b")
	for _, id := range []string{"p1-ask", "p1-two", "p1-cancel", "p1-slow"} {
		if got[id] != "ful-a" {
			t.Fatalf("B's /v1/proposals: %s owned by %q, want ful-a (all: %v)", id, got[id], got)
		}
	}
	req, _ := http.NewRequestWithContext(w.ctx, "DELETE", "http://"+addr["ful-b"]+"/v1/proposals/p1-cancel", nil)
	req.Header.Set("Authorization", "Bearer "+apiToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("DELETE p1-cancel on B: %v %v", resp, err)
	}
	resp.Body.Close()
	if out, err := prop.Wait(w.ctx, "p1-cancel"); err != nil || !out.Rejected || out.Reason != "other" || out.RejectedBy != "ful-b" {
		t.Fatalf("p1-cancel: %+v %v, want reject other from ful-b", out, err)
	}

	handOver("ful-a", a, "ful-b", []string{"p1-ask", "p1-two"}, "p1-slow")

	// B now holds new work; A comes back, and B leaves it in turn.
	propose("p2-ask", "ask", "")
	propose("p2-slow", "slow", "p2-slow")
	w.elicitationFor("p2-ask", 1)
	a = start("ful-a")
	handOver("ful-b", b, "ful-a", []string{"p2-ask"}, "p2-slow")
	// A, alone now, has nothing left: it stops with nothing to answer.
	stop("ful-a", a)

	// The processes have exited: whatever they sent is on the wire.
	want := map[string]struct{ kind, from, call string }{
		"p1-ask":    {agent.KindRequest, "ful-b", `{"name":"ask","arguments":{"gate":""}}`},
		"p1-two":    {agent.KindRequest, "ful-b", `{"name":"ask","arguments":{"gate":""}}`},
		"p1-slow":   {agent.KindRequest, "ful-a", `{"name":"slow","arguments":{"gate":"p1-slow"}}`},
		"p1-cancel": {agent.KindReject, "ful-b", ""},
		"p2-ask":    {agent.KindRequest, "ful-a", `{"name":"ask","arguments":{"gate":""}}`},
		"p2-slow":   {agent.KindRequest, "ful-b", `{"name":"slow","arguments":{"gate":"p2-slow"}}`},
	}
	for id, wt := range want {
		answers := w.answersTo(id)
		if len(answers) != 1 || answers[0].Kind != wt.kind || answers[0].From != wt.from {
			t.Errorf("%s: answers %v, want exactly one %s from %s", id, answers, wt.kind, wt.from)
			continue
		}
		env := answers[0]
		if wt.kind == agent.KindReject {
			if reasonOf(env) != "other" || !slices.Equal(env.To, []string{"coder"}) {
				t.Errorf("%s: reject %+v, want reason other to coder", id, env)
			}
			continue
		}
		var call agent.RPCRequest
		if err := json.Unmarshal(env.Payload, &call); err != nil || call.Method != "tools/call" || !jsonEqual(call.Params, json.RawMessage(wt.call)) || !slices.Equal(env.To, []string{"fs"}) {
			t.Errorf("%s: request %s to %v (%v), want tools/call %s to fs", id, env.Payload, env.To, err, wt.call)
		}
	}
	for _, env := range w.wire.Envelopes() {
		if env.Kind == agent.KindReject && env.CorrelationID.First() != "p1-cancel" {
			t.Errorf("a member rejected %s (%s): %s", env.CorrelationID.First(), reasonOf(env), env.Payload)
		}
	}
	// Each prompt was answered once (alice accepted each re-ask once),
	// and each call ran once.
	for tool, n := range map[string]int32{"ask": 3, "slow": 2} {
		if got := w.calls[tool].Load(); got != n {
			t.Errorf("%s ran %d times, want %d", tool, got, n)
		}
	}
	if !strings.Contains(w.logs.String(), "handed over to them, none rejected") {
		t.Error("no member logged a handover")
	}
}

// jsonEqual reports whether two JSON texts hold the same value.
func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return string(xb) == string(yb)
}
