//go:build unix

package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/internal/mailpittest"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/spacetest"
	"github.com/mewkit/fulfiller/internal/toolserver"
)

// notifyPolicy escalates production writes to alice, reminds her after
// 1s, and asks bob too after 2s.
const notifyPolicy = `package fulfiller

default decision := {"action": "reject", "reason": "policy", "message": "not allowed"}

decision := {"action": "escalate", "approvers": ["alice"], "message": "production writes need a human", "timeout": "1m",
	"reminders": ["1s"], "escalate_to": [{"after": "2s", "approvers": ["bob"]}]} if {
	input.tool.name == "write_file"
	startswith(input.tool.arguments.path, "/srv/prod/")
}
`

// hookReceiver is a webhook endpoint that verifies X-Fulfiller-Signature
// as docs/operations.md tells receivers to, over the raw body, and keeps
// the bodies it accepted, in order.
type hookReceiver struct {
	secret []byte
	mu     sync.Mutex
	bodies []string
	bad    int
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	mac := hmac.New(sha256.New, h.secret)
	mac.Write(body)
	want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
	h.mu.Lock()
	defer h.mu.Unlock()
	if !hmac.Equal([]byte(r.Header.Get("X-Fulfiller-Signature")), []byte(want)) {
		h.bad++
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	h.bodies = append(h.bodies, string(body))
}

func (h *hookReceiver) got() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string{}, h.bodies...)
}

// TestRunBinaryNotifies is issue 29's notification story through the
// binary: a production write escalated to alice goes out as a signed
// webhook event (verified by the receiver here) and as an e-mail to her
// (received by a real SMTP server) with the inbox link and no arguments;
// alice is reminded after 1s; after 2s bob is asked too (webhook and
// e-mail to him); bob approves, the call is fulfilled once, and
// prompt.ended says approved.
func TestRunBinaryNotifies(t *testing.T) {
	t.Parallel()
	bin := fulfillerBinary(t)
	srv, policy := newBinarySpace(t, notifyPolicy)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wire := spacetest.RecordWire(t, srv)
	files := toolserver.NewFiles(map[string]string{"/srv/prod/motd": "hello"})
	spacetest.ServeTools(t, spacetest.Join(t, ctx, srv, "fs", "human-token"), files.Tools()...)
	spacetest.Join(t, ctx, srv, "alice", "human-token") // present, never answers
	bob := spacetest.Join(t, ctx, srv, "bob", "human-token")
	coder := spacetest.Join(t, ctx, srv, "coder", "coder-token")
	prop := spacetest.NewProposer(t, coder)

	hook := &hookReceiver{secret: []byte("hook-s3cret")}
	hookSrv := httptest.NewServer(hook)
	t.Cleanup(hookSrv.Close)
	mail := mailpittest.Start(t, mailpittest.Options{})
	dir := t.TempDir()
	secretFile, directory := filepath.Join(dir, "hook.secret"), filepath.Join(dir, "approvers.yaml")
	if err := os.WriteFile(secretFile, []byte("hook-s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(directory, []byte("alice: {name: Alice Liddell, email: alice@example.com}\nbob: {email: bob@example.com}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	cmd := exec.CommandContext(ctx, bin, "run", "--gateway", srv.URL(), "--policy", policy, "--state", filepath.Join(dir, "state"),
		"--log-format", "json", "--policy-timeout", "1m", "--notify-secret-file", secretFile, "--approver-directory", directory,
		"--inbox-url", "https://inbox.example.com/",
		// Neither target holds a key, so the command line will do.
		"--notify", hookSrv.URL+"/hook", "--notify", fmt.Sprintf("smtp://%s?from=fulfiller@example.com", mail.SMTP))
	cmd.Env = append(os.Environ(), "FULFILLER_TOKEN=fulfiller-token")
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() })
	poll.Until(t, "the fulfiller joined", func() bool { _, ok := coder.Participant("fulfiller"); return ok })

	if _, err := prop.Propose(ctx, "p-1", []string{"fs"}, json.RawMessage(`{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/srv/prod/motd","content":"s3cret-content"}}}`)); err != nil {
		t.Fatal(err)
	}
	// Bob is asked by the second tier: he approves.
	prompt := wire.WaitFor(t, "bob's prompt", func(e agent.Envelope) bool {
		return e.Kind == agent.KindRequest && len(e.To) == 1 && e.To[0] == "bob" && strings.Contains(string(e.Payload), `"elicitation/create"`)
	})
	var req agent.RPCRequest
	_ = json.Unmarshal(prompt.Payload, &req)
	if _, err := bob.Send(ctx, agent.Envelope{To: []string{"fulfiller"}, Kind: agent.KindResponse, CorrelationID: agent.CorrelationIDs{prompt.ID},
		Payload: json.RawMessage(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":{"action":"accept","content":{"approve":true}}}`)}); err != nil {
		t.Fatal(err)
	}
	if out, err := prop.Wait(ctx, "p-1"); err != nil || !out.Fulfilled {
		t.Fatalf("p-1: %+v %v, want fulfilled\n%s", out, err, logs.String())
	}

	// The webhook: four events, each signed (the receiver refuses any
	// other), in order, exactly.
	poll.Until(t, "four webhook events", func() bool { return len(hook.got()) >= 4 })
	digest, _ := approval.CallDigest("tools/call", json.RawMessage(`{"name":"write_file","arguments":{"path":"/srv/prod/motd","content":"s3cret-content"}}`))
	common := `"proposal":"p-1","proposer":"coder","method":"tools/call","tool":"write_file","server":"fs","digest":"` + digest[:12] + `"`
	want := []string{
		`{"type":"prompt.opened","time":"*",` + common + `,"approvers":["alice"],"quorum":1,"deadline":"*","url":"https://inbox.example.com/#proposal=p-1"}`,
		`{"type":"prompt.reminder","time":"*",` + common + `,"approvers":["alice"],"quorum":1,"deadline":"*","url":"https://inbox.example.com/#proposal=p-1"}`,
		`{"type":"prompt.escalated","time":"*",` + common + `,"approvers":["bob"],"quorum":1,"deadline":"*","url":"https://inbox.example.com/#proposal=p-1"}`,
		`{"type":"prompt.ended","time":"*",` + common + `,"approvers":["alice","bob"],"quorum":1,"deadline":"*","url":"https://inbox.example.com/#proposal=p-1","outcome":"approved"}`,
	}
	got := hook.got()
	for i, w := range want {
		if g := spacetest.Blank(got[i], "time", "deadline"); g != w {
			t.Errorf("webhook event %d\n got %s\nwant %s", i+1, got[i], w)
		}
	}
	if len(got) != 4 || hook.bad != 0 {
		t.Errorf("%d events, %d with a bad signature; want 4 and none", len(got), hook.bad)
	}

	// The e-mail: opened and reminder to alice, escalated to bob, ended to
	// both; with the link, never the arguments.
	msgs := mail.Received(t, 4)
	bySubject := map[string]mailpittest.Message{}
	for _, m := range msgs {
		var to []string
		for _, a := range m.To {
			to = append(to, a.Address)
		}
		bySubject[m.Subject+" → "+strings.Join(to, ",")] = m
		if text := mail.Text(t, m.ID); strings.Contains(text, "s3cret-content") || strings.Contains(text, "Arguments") {
			t.Errorf("mail %q holds the arguments:\n%s", m.Subject, text)
		}
	}
	const what = `: "coder" wants to call "write_file" on "fs" → `
	wantMail := []string{
		"[fulfiller] approval needed" + what + "alice@example.com",
		"[fulfiller] reminder: approval still needed" + what + "alice@example.com",
		"[fulfiller] escalated to you: approval needed" + what + "bob@example.com",
		"[fulfiller] approved" + what + "alice@example.com,bob@example.com",
	}
	for _, k := range wantMail {
		if _, ok := bySubject[k]; !ok {
			t.Errorf("no mail %q; got %q", k, keysOf(bySubject))
		}
	}
	if len(msgs) != len(wantMail) {
		t.Errorf("%d mails, want %d: %q", len(msgs), len(wantMail), keysOf(bySubject))
	}
	text := strings.ReplaceAll(mail.Text(t, bySubject[wantMail[0]].ID), "\r\n", "\n")
	if !strings.Contains(text, "needs 1 approval(s) from: Alice Liddell (alice).") ||
		!strings.Contains(text, "Open your inbox to answer (sign in there; this link approves nothing):\nhttps://inbox.example.com/#proposal=p-1\n") {
		t.Errorf("prompt.opened mail:\n%s", text)
	}
	if n := countCalls(wire, "p-1"); n != 1 {
		t.Errorf("%d fulfilments of p-1, want 1", n)
	}
}

func keysOf[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// countCalls counts the fulfiller's tools/call requests for proposal id.
func countCalls(wire *spacetest.Wire, id string) int {
	n := 0
	for _, e := range wire.Envelopes() {
		if e.From == "fulfiller" && e.Kind == agent.KindRequest && strings.Contains(string(e.Payload), `"tools/call"`) && e.CorrelationID.First() == id {
			n++
		}
	}
	return n
}
