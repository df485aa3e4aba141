//go:build unix

package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/spacetest"
	"github.com/mewkit/fulfiller/internal/toolserver"
)

// grantPolicy escalates log reads to alice, grantable for up to 1h under
// the approved path's directory, and lets a read through on a grant.
const grantPolicy = `package fulfiller

decision := {"action": "fulfill", "message": "granted"} if {
	input.tool.name == "read_log"
	count(input.grants) > 0
}

decision := {
	"action": "escalate",
	"approvers": ["alice"],
	"message": "may coder read this log?",
	"grantable": {"max_ttl": "1h", "scope": ["proposer", "tool", "arguments.path:prefix"]},
} if {
	input.tool.name == "read_log"
	count(input.grants) == 0
}
`

// TestRunBinaryGrants is issue 16's grant story run as an operator would,
// with the built binary on a DIR store: alice approves with a grant; the
// next read under the same directory is fulfilled without a prompt and its
// decision-log record names the grant; the grant survives SIGKILL and a
// restart; `fulfiller grants list` shows it and `revoke` ends it, after
// which alice is asked again.
func TestRunBinaryGrants(t *testing.T) {
	parallelCLI(t) // the fulfiller as a process of its own: mostly waiting
	bin := fulfillerBinary(t)
	srv, policy := newBinarySpace(t, grantPolicy)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	wire := spacetest.RecordWire(t, srv)
	var reads atomic.Int32
	spacetest.ServeTools(t, spacetest.Join(t, ctx, srv, "fs", "human-token"), toolserver.Tool{Name: "read_log",
		InputSchema: map[string]any{"type": "object"},
		Call:        func(context.Context, json.RawMessage) (string, error) { reads.Add(1); return "log lines", nil }})
	alice := spacetest.Join(t, ctx, srv, "alice", "human-token")
	coder := spacetest.Join(t, ctx, srv, "coder", "coder-token")
	prop := spacetest.NewProposer(t, coder)

	dir := t.TempDir()
	state, logPath, addr := filepath.Join(dir, "state"), filepath.Join(dir, "decisions.jsonl"), freeAddr(t)
	var logs lockedBuffer
	start := func() *os.Process {
		cmd := exec.CommandContext(ctx, bin, "run", "--gateway", srv.URL(), "--policy", policy, "--approvers", "alice",
			"--state", state, "--http", addr, "--decision-log", logPath, "--log-format", "json", "--policy-timeout", "1m")
		cmd.Env = append(os.Environ(), "FULFILLER_TOKEN=fulfiller-token", "FULFILLER_HTTP_TOKEN=op-secret")
		cmd.Stderr = &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		poll.UntilServed(t, "/readyz says ready", func() bool { code, _ := httpGet(addr, "/readyz", ""); return code == 200 })
		return cmd.Process
	}
	read := func(id, path string) {
		t.Helper()
		if _, err := prop.Propose(ctx, id, []string{"fs"}, json.RawMessage(`{"method":"tools/call","params":{"name":"read_log","arguments":{"path":"`+path+`"}}}`)); err != nil {
			t.Fatal(err)
		}
	}
	fulfilled := func(id string) {
		t.Helper()
		if out, err := prop.Wait(ctx, id); err != nil || !out.Fulfilled {
			t.Fatalf("%s: %+v %v, want fulfilled\n%s", id, out, err, logs.String())
		}
	}
	asked := func(id string) agent.Envelope {
		t.Helper()
		return wire.WaitFor(t, "the prompt about "+id, func(e agent.Envelope) bool {
			return e.Kind == agent.KindRequest && strings.Contains(string(e.Payload), `"elicitation/create"`) && strings.Contains(string(e.Payload), `"id":"`+id+`"`)
		})
	}
	promptsAbout := func(id string) int {
		n := 0
		for _, e := range wire.Envelopes() {
			if e.Kind == agent.KindRequest && strings.Contains(string(e.Payload), `"elicitation/create"`) && strings.Contains(string(e.Payload), `"id":"`+id+`"`) {
				n++
			}
		}
		return n
	}

	first := start()
	poll.Until(t, "the fulfiller joined", func() bool { _, ok := coder.Participant("fulfiller"); return ok })
	read("p-1", "/srv/logs/app.log")
	prompt := asked("p-1")
	if !strings.Contains(string(prompt.Payload), `"grant":{"type":"string","title":"Also allow calls like this for","enum":["","15m","1h"],"default":""}`) {
		t.Fatalf("the prompt offers no grant: %s", prompt.Payload)
	}
	var req agent.RPCRequest
	_ = json.Unmarshal(prompt.Payload, &req)
	if _, err := alice.Send(ctx, agent.Envelope{To: []string{"fulfiller"}, Kind: agent.KindResponse, CorrelationID: agent.CorrelationIDs{prompt.ID},
		Payload: json.RawMessage(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":{"action":"accept","content":{"approve":true,"grant":"1h"}}}`)}); err != nil {
		t.Fatal(err)
	}
	fulfilled("p-1")
	read("p-2", "/srv/logs/error.log")
	fulfilled("p-2")

	// kill -9, and the same DIR: the grant is still there.
	if err := first.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the fulfiller gone", func() bool { _, ok := coder.Participant("fulfiller"); return !ok })
	start()
	poll.Until(t, "the fulfiller back", func() bool { _, ok := coder.Participant("fulfiller"); return ok })
	read("p-3", "/srv/logs/debug.log")
	fulfilled("p-3")
	for _, id := range []string{"p-2", "p-3"} {
		if n := promptsAbout(id); n != 0 {
			t.Errorf("%d prompts about %s, want none: the grant covers it", n, id)
		}
	}

	ops := operatorFlags(t, addr)
	stdout, stderr, code := cli(t, "", append([]string{"grants", "list"}, ops...)...)
	// The gateway is not said to authenticate senders: the grant is for
	// anyone who may propose, and says so.
	if code != 0 || !strings.Contains(stdout, "live   anyone    anyone who may propose in this space → read_log, path under /srv/logs/  alice") {
		t.Fatalf("grants list: exit %d\n%s%s", code, stdout, stderr)
	}
	id := strings.Fields(strings.Split(stdout, "\n")[1])[0]
	if stdout, stderr, code = cli(t, "", append([]string{"grants", "revoke", id}, ops...)...); code != 0 || stdout != "revoked "+id+": anyone who may propose in this space → read_log, path under /srv/logs/\n" {
		t.Fatalf("grants revoke: exit %d %q %q", code, stdout, stderr)
	}
	read("p-4", "/srv/logs/app.log")
	asked("p-4")

	// The decision log: the grant made on p-1's approval, and the
	// decisions it allowed name it.
	raw, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	byProposal := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var r struct {
			Type, Stage string
			ProposalID  string `json:"proposal_id"`
			GrantID     string `json:"grant_id"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		byProposal[r.ProposalID] = append(byProposal[r.ProposalID], r.Stage+":"+r.GrantID)
	}
	if got := strings.Join(byProposal["p-1"], " "); !strings.Contains(got, "granted:"+id) {
		t.Errorf("p-1's records %s lack granted:%s", got, id)
	}
	for _, p := range []string{"p-2", "p-3"} {
		if got := byProposal[p]; len(got) == 0 || got[0] != "decided:"+id {
			t.Errorf("%s's records %v, want decided:%s first", p, got, id)
		}
	}
	if reads.Load() != 3 {
		t.Errorf("read_log ran %d times, want 3", reads.Load())
	}
}

// TestRunBinaryGrantPinnedOnlyWithTheFlag (security round 3, item 3): run
// with FULFILLER_GATEWAY_AUTHENTICATES_FROM (the operator states the
// gateway authenticates senders), a grant is pinned to its proposer and
// grants list says so. Restarted on the same store without the flag, that
// grant matches nothing — anyone could post in coder's name — and run
// warns about it at start; it is still listed, as unusable, and coder's
// next read is asked about.
func TestRunBinaryGrantPinnedOnlyWithTheFlag(t *testing.T) {
	parallelCLI(t) // the fulfiller as a process of its own: mostly waiting
	bin := fulfillerBinary(t)
	srv, policy := newBinarySpace(t, grantPolicy)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wire := spacetest.RecordWire(t, srv)
	spacetest.ServeTools(t, spacetest.Join(t, ctx, srv, "fs", "human-token"), toolserver.Tool{Name: "read_log",
		InputSchema: map[string]any{"type": "object"},
		Call:        func(context.Context, json.RawMessage) (string, error) { return "log lines", nil }})
	alice := spacetest.Join(t, ctx, srv, "alice", "human-token")
	coder := spacetest.Join(t, ctx, srv, "coder", "coder-token")
	prop := spacetest.NewProposer(t, coder)
	dir := t.TempDir()
	state, addr := filepath.Join(dir, "state"), freeAddr(t)
	start := func(env ...string) (*exec.Cmd, *lockedBuffer) {
		var logs lockedBuffer
		cmd := exec.CommandContext(ctx, bin, "run", "--gateway", srv.URL(), "--policy", policy, "--approvers", "alice",
			"--state", state, "--http", addr, "--log-format", "json", "--policy-timeout", "1m")
		cmd.Env = append(append(os.Environ(), "FULFILLER_TOKEN=fulfiller-token", "FULFILLER_HTTP_TOKEN=op-secret"), env...)
		cmd.Stderr = &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		poll.UntilServed(t, "/readyz says ready", func() bool { code, _ := httpGet(addr, "/readyz", ""); return code == 200 })
		return cmd, &logs
	}
	read := func(id string) {
		t.Helper()
		if _, err := prop.Propose(ctx, id, []string{"fs"}, json.RawMessage(`{"method":"tools/call","params":{"name":"read_log","arguments":{"path":"/srv/logs/`+id+`.log"}}}`)); err != nil {
			t.Fatal(err)
		}
	}
	asked := func(id string) agent.Envelope {
		t.Helper()
		return wire.WaitFor(t, "the prompt about "+id, func(e agent.Envelope) bool {
			return e.Kind == agent.KindRequest && strings.Contains(string(e.Payload), `"elicitation/create"`) && strings.Contains(string(e.Payload), `"id":"`+id+`"`)
		})
	}
	ops := operatorFlags(t, addr)

	first, logs := start("FULFILLER_GATEWAY_AUTHENTICATES_FROM=true")
	poll.Until(t, "the fulfiller joined", func() bool { _, ok := coder.Participant("fulfiller"); return ok })
	read("p-1")
	prompt := asked("p-1")
	if !strings.Contains(string(prompt.Payload), `"grant":{"max_ttl":"1h","scope":["proposer","tool","arguments.path:prefix"],"offers":["15m","1h"]}`) {
		t.Fatalf("the prompt does not offer a grant pinned to coder: %s", prompt.Payload)
	}
	var req agent.RPCRequest
	_ = json.Unmarshal(prompt.Payload, &req)
	if _, err := alice.Send(ctx, agent.Envelope{To: []string{"fulfiller"}, Kind: agent.KindResponse, CorrelationID: agent.CorrelationIDs{prompt.ID},
		Payload: json.RawMessage(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":{"action":"accept","content":{"approve":true,"grant":"1h"}}}`)}); err != nil {
		t.Fatal(err)
	}
	if out, err := prop.Wait(ctx, "p-1"); err != nil || !out.Fulfilled {
		t.Fatalf("p-1: %+v %v, want fulfilled\n%s", out, err, logs.String())
	}
	stdout, stderr, code := cli(t, "", append([]string{"grants", "list"}, ops...)...)
	if code != 0 || !strings.Contains(stdout, "live   pinned: coder  coder → read_log, path under /srv/logs/  alice") {
		t.Fatalf("grants list with the flag: exit %d\n%s%s", code, stdout, stderr)
	}
	id := strings.Fields(strings.Split(stdout, "\n")[1])[0]
	if err := first.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := first.Wait(); err != nil {
		t.Fatalf("first run: %v\n%s", err, logs.String())
	}

	_, logs = start()
	// Logged once the store's grants are loaded, which /readyz does not
	// wait for.
	poll.Until(t, "the start-up warning about "+id, func() bool {
		return strings.Contains(logs.String(), `"msg":"grant pinned to a proposer matches nothing`) && strings.Contains(logs.String(), `"grant":"`+id+`","proposer":"coder"`)
	})
	stdout, stderr, code = cli(t, "", append([]string{"grants", "list"}, ops...)...)
	if code != 0 || !strings.Contains(stdout, id+"  unusable  pinned: coder  coder → read_log, path under /srv/logs/  alice") {
		t.Errorf("grants list without the flag: exit %d\n%s%s", code, stdout, stderr)
	}
	read("p-2")
	asked("p-2") // the pinned grant no longer lets it through
}

// operatorFlags are the grants command's flags for the operator API at
// addr, the token in a file: flags rather than FULFILLER_HTTP and
// FULFILLER_HTTP_TOKEN, which cli would have to set with t.Setenv, so that
// the test can run in parallel (parallelCLI).
func operatorFlags(t *testing.T, addr string) []string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "http-token")
	if err := os.WriteFile(file, []byte("op-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"--http", addr, "--http-token-file", file}
}
