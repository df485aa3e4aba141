package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/spacetest"
	"github.com/mewkit/fulfiller/internal/toolserver"
)

// TestRunBinaryApproverKeysReload runs the real binary with an
// --approver-keys file that lists only bob. Alice is asked; then her key
// is added to the file while run runs: her unsigned answer is refused as a
// forgery from then on, and her signed answer counts, without a restart.
// A broken file is then refused (logged, counted) and her key stays in
// force: an unsigned answer is still a forgery and a signed one counts.
// No key is ever logged.
func TestRunBinaryApproverKeysReload(t *testing.T) {
	t.Parallel() // the fulfiller as a process of its own: mostly waiting
	bin := fulfillerBinary(t)
	srv, policy := newBinarySpace(t, `package fulfiller

decision := {"action": "escalate", "message": "a human decides"} if input.tool.name == "write_file"
`)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	wire := spacetest.RecordWire(t, srv)
	spacetest.ServeTools(t, spacetest.Join(t, ctx, srv, "fs", "human-token"), toolserver.Tool{Name: "write_file",
		InputSchema: map[string]any{"type": "object"},
		Call:        func(context.Context, json.RawMessage) (string, error) { return "written", nil }})
	alice := spacetest.Join(t, ctx, srv, "alice", "human-token")
	coder := spacetest.Join(t, ctx, srv, "coder", "coder-token")
	prop := spacetest.NewProposer(t, coder)

	alicePub, alicePriv, _ := ed25519.GenerateKey(nil)
	bobPub, _, _ := ed25519.GenerateKey(nil)
	aliceLine := "alice " + approval.EncodePublicKey(alicePub) + "\n"
	bobLine := "bob " + approval.EncodePublicKey(bobPub) + "\n"
	dir := t.TempDir()
	keysPath := filepath.Join(dir, "passkeys")
	writeKeys := func(text string) {
		t.Helper()
		// As the team inbox writes its passkeys file: renamed into place.
		tmp := keysPath + ".tmp"
		if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, keysPath); err != nil {
			t.Fatal(err)
		}
	}
	writeKeys(bobLine)

	addr, logPath := freeAddr(t), filepath.Join(dir, "decisions.jsonl")
	var logs lockedBuffer
	cmd := exec.CommandContext(ctx, bin, "run", "--gateway", srv.URL(), "--policy", policy, "--approvers", "alice",
		"--approver-keys", keysPath, "--state", filepath.Join(dir, "state"), "--http", addr, "--decision-log", logPath,
		"--log-format", "json", "--policy-timeout", "1m")
	cmd.Env = append(os.Environ(), "FULFILLER_TOKEN=fulfiller-token")
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() })
	poll.UntilServed(t, "/readyz says ready", func() bool { code, _ := httpGet(addr, "/readyz", ""); return code == 200 })
	poll.Until(t, "the fulfiller joined", func() bool { _, ok := coder.Participant("fulfiller"); return ok })

	metric := func(name string) string {
		_, body := httpGet(addr, "/metrics", "")
		for _, l := range strings.Split(body, "\n") {
			if v, ok := strings.CutPrefix(l, name+" "); ok {
				return v
			}
		}
		return ""
	}
	asked := func(id string) agent.Envelope {
		t.Helper()
		if _, err := prop.Propose(ctx, id, []string{"fs"}, json.RawMessage(`{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/`+id+`"}}}`)); err != nil {
			t.Fatal(err)
		}
		return wire.WaitFor(t, "the prompt about "+id, func(e agent.Envelope) bool {
			return e.From == "fulfiller" && e.Kind == agent.KindRequest && strings.Contains(string(e.Payload), `"elicitation/create"`) && strings.Contains(string(e.Payload), `"id":"`+id+`"`)
		})
	}
	answer := func(prompt agent.Envelope, content string) {
		t.Helper()
		var req struct {
			ID     json.RawMessage `json:"id"`
			Params struct {
				Meta struct {
					Proposal struct {
						Digest string `json:"digest"`
					} `json:"proposal"`
				} `json:"_meta"`
			} `json:"params"`
		}
		if err := json.Unmarshal(prompt.Payload, &req); err != nil || req.Params.Meta.Proposal.Digest == "" {
			t.Fatalf("prompt without a digest (%v): %s", err, prompt.Payload)
		}
		if content == "signed" {
			sig, err := approval.Sign(alicePriv, prompt.ID, req.Params.Meta.Proposal.Digest, "accept", json.RawMessage(`{"approve":true}`))
			if err != nil {
				t.Fatal(err)
			}
			content = `{"approve":true,"signature":"` + sig + `"}`
		}
		if _, err := alice.Send(ctx, agent.Envelope{To: []string{"fulfiller"}, Kind: agent.KindResponse, CorrelationID: agent.CorrelationIDs{prompt.ID},
			Payload: json.RawMessage(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":{"action":"accept","content":` + content + `}}`)}); err != nil {
			t.Fatal(err)
		}
	}
	forgeries := 0
	refusedUnsigned := func(prompt agent.Envelope, id string) {
		t.Helper()
		answer(prompt, `{"approve":true}`)
		forgeries++
		poll.Until(t, "alice's unsigned answer about "+id+" refused as a forgery", func() bool {
			return metric(`fulfiller_approver_answers_total{kind="forgery"}`) == strconv.Itoa(forgeries)
		})
		for _, e := range wire.Envelopes() {
			if e.From == "fulfiller" && e.CorrelationID.First() == id && (e.Kind == agent.KindReject || strings.Contains(string(e.Payload), `"tools/call"`)) {
				t.Fatalf("%s answered after an unsigned answer: %s", id, e.Raw)
			}
		}
	}
	fulfilled := func(id string) {
		t.Helper()
		if out, err := prop.Wait(ctx, id); err != nil || !out.Fulfilled {
			t.Fatalf("%s: %+v %v, want fulfilled\n%s", id, out, err, logs.String())
		}
	}

	// Asked while alice has no key; her key added while run runs.
	p1 := asked("p-1")
	writeKeys(bobLine + aliceLine)
	poll.Until(t, "the keys reloaded", func() bool {
		return strings.Contains(logs.String(), `"msg":"approver keys reloaded","file":"`+keysPath+`","approvers":2,"ed25519":2,"passkeys":0`)
	})
	refusedUnsigned(p1, "p-1")
	answer(p1, "signed")
	fulfilled("p-1")

	// A broken file: refused, logged, counted; alice's key stays.
	writeKeys(aliceLine + "carol not-a-key\n")
	poll.UntilServed(t, "the broken file refused", func() bool { return metric("fulfiller_approver_keys_reload_failures_total") == "1" })
	if got := metric("fulfiller_approver_keys_reload_failing"); got != "1" {
		t.Errorf("fulfiller_approver_keys_reload_failing %q, want 1", got)
	}
	if !strings.Contains(logs.String(), `"msg":"approver keys reload failed; the last good keys stay in force","file":"`+keysPath+`"`) {
		t.Errorf("the refused reload is not logged:\n%s", logs.String())
	}
	p2 := asked("p-2")
	refusedUnsigned(p2, "p-2")
	answer(p2, "signed")
	fulfilled("p-2")

	// A writer that is not atomic truncates the file and writes it back
	// later (issue 41, row 5): the empty file in between is refused at
	// WARN, and an unsigned answer in that window is still a forgery.
	if err := os.WriteFile(keysPath, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	poll.UntilServed(t, "the truncated file refused", func() bool { return metric("fulfiller_approver_keys_reload_failures_total") == "2" })
	if !strings.Contains(logs.String(), `"level":"WARN","msg":"approver keys reload failed; the last good keys stay in force","file":"`+keysPath+`","err":"`+keysPath+`: no approver keys:`) {
		t.Errorf("the truncated file is not refused at WARN:\n%s", logs.String())
	}
	p3 := asked("p-3")
	refusedUnsigned(p3, "p-3")
	writeKeys(aliceLine)
	poll.UntilServed(t, "the file written back", func() bool { return metric("fulfiller_approver_keys_reload_failing") == "0" })
	answer(p3, "signed")
	fulfilled("p-3")

	// The decision log marks alice's counted answers as verified, and the
	// unsigned ones as forgeries.
	raw, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	var approvals []string
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var r struct {
			Type, Stage, Approver string
			ProposalID            string `json:"proposal_id"`
			SignatureVerified     *bool  `json:"signature_verified"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if r.Type == "approval" {
			v := "-"
			if r.SignatureVerified != nil {
				v = map[bool]string{true: "verified", false: "unverified"}[*r.SignatureVerified]
			}
			approvals = append(approvals, r.ProposalID+":"+r.Stage+":"+r.Approver+":"+v)
		}
	}
	want := []string{"p-1:forgery:alice:unverified", "p-1:answered:alice:verified", "p-2:forgery:alice:unverified", "p-2:answered:alice:verified",
		"p-3:forgery:alice:unverified", "p-3:answered:alice:verified"}
	if strings.Join(approvals, " ") != strings.Join(want, " ") {
		t.Errorf("decision log approvals %v, want %v", approvals, want)
	}
	for _, key := range []string{approval.EncodePublicKey(alicePub), approval.EncodePublicKey(bobPub)} {
		if strings.Contains(logs.String(), key) {
			t.Errorf("a key was logged:\n%s", logs.String())
		}
	}
}
