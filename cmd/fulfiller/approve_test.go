package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/internal/space"
	"github.com/mewkit/fulfiller/internal/spacetest"
)

func TestKeysGenerate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "alice.key")
	out, errOut, code := cli(t, "", "keys", "generate", "--id", "alice", "--out", path)
	if code != 0 || !regexp.MustCompile(`^alice [A-Za-z0-9_-]{43}\n$`).MatchString(out) {
		t.Fatalf("code %d stdout %q stderr %q", code, out, errOut)
	}
	if !strings.Contains(errOut, "wrote the private key of alice to "+path) {
		t.Errorf("stderr %q", errOut)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v %v", fi.Mode(), err)
	}
	_, errOut, code = cli(t, "", "keys", "generate", "--id", "alice", "--out", path)
	if code != 2 || !strings.Contains(errOut, "--out "+path+" exists; keys are never overwritten") {
		t.Errorf("overwrite: code %d %q", code, errOut)
	}
	if _, errOut, code = cli(t, "", "keys", "generate"); code != 2 || !strings.Contains(errOut, "--id is required") {
		t.Errorf("no id: code %d %q", code, errOut)
	}
}

func TestRunApproverKeysErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "approvers.keys")
	if err := os.WriteFile(bad, []byte("# on-call\nalice iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w\nbob not-a-key!\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := cli(t, "", "run", "--gateway", "ws://127.0.0.1:1", "--approver-keys", bad)
	if code != 2 || errOut != "fulfiller: --approver-keys "+bad+":3: key of bob: not base64url without padding\n" {
		t.Errorf("code %d stderr %q", code, errOut)
	}
	// A missing file is nobody enrolled yet (TestAbsentFileIsNoEnrolmentYet);
	// a missing directory is an error.
	missing := filepath.Join(dir, "nodir", "nope.keys")
	if _, errOut, code = cli(t, "", "run", "--gateway", "ws://127.0.0.1:1", "--approver-keys", missing); code != 2 || !strings.Contains(errOut, missing) {
		t.Errorf("missing file: code %d stderr %q", code, errOut)
	}
}

func TestApproveUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"approve", "--id", "alice"}, "--gateway is required"},
		{[]string{"approve", "--gateway", "ws://127.0.0.1:1"}, "--id is required"},
		{[]string{"approve", "--gateway", "ws://127.0.0.1:1", "--id", "fulfiller"}, `--id "fulfiller" is the fulfiller's own id`},
		{[]string{"approve", "--gateway", "ws://127.0.0.1:1", "--id", "ful-b", "--fulfiller", "ful-a,ful-b"}, `--id "ful-b" is the fulfiller's own id`},
		{[]string{"approve", "--gateway", "ws://127.0.0.1:1", "--id", "alice", "--auto", "maybe"}, `--auto "maybe": want accept or decline`},
		{[]string{"approve", "--gateway", "ws://127.0.0.1:1", "--id", "alice", "--reason", "x"}, "--reason is for --auto answers"},
		{[]string{"approve", "--gateway", "ws://127.0.0.1:1", "--id", "alice", "--key", "/nonexistent/alice.key"}, "--key open /nonexistent/alice.key: no such file or directory"},
		{[]string{"approve", "--gateway", "ws://127.0.0.1:1", "--id", "alice", "--web", "0.0.0.0:8765"}, "--web 0.0.0.0:8765: the inbox serves plain HTTP only on loopback"},
		{[]string{"approve", "--gateway", "ws://127.0.0.1:1", "--id", "alice", "--web", "8765"}, `--web "8765": want host:port`},
		{[]string{"approve", "--gateway", "ws://127.0.0.1:1", "--id", "alice", "--web", "127.0.0.1:8765", "--web-tls-cert", "c.pem"}, "--web-tls-cert and --web-tls-key go together"},
		{[]string{"approve", "--gateway", "ws://127.0.0.1:1", "--id", "alice", "--web", "[::]:8765", "--web-tls-cert", "/nonexistent/c.pem", "--web-tls-key", "/nonexistent/k.pem"}, "--web-tls-cert /nonexistent/c.pem"},
		{[]string{"approve", "--gateway", "ws://127.0.0.1:1", "--id", "alice", "--web-tls-cert", "c.pem"}, "--web-tls-cert and --web-tls-key are for --web"},
		{[]string{"approve", "--gateway", "ws://127.0.0.1:1", "--id", "alice", "--web", "127.0.0.1:8765", "--auto", "accept"}, "--web and --auto"},
	} {
		_, errOut, code := cli(t, "", tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: code %d stderr %q, want %q", tc.args, code, errOut, tc.want)
		}
	}
}

// A bad --fulfiller list is one line naming it, exit 2, before anything
// is dialled.
func TestApproveFulfillerListErrors(t *testing.T) {
	for _, tc := range []struct {
		list []string
		want string
	}{
		{[]string{"ful-a,,ful-b"}, `fulfiller: --fulfiller "ful-a,,ful-b": id 2 of the list is empty` + "\n"},
		{[]string{"ful-a,"}, `fulfiller: --fulfiller "ful-a,": id 2 of the list is empty` + "\n"},
		{[]string{"ful-a", ""}, `fulfiller: --fulfiller "ful-a,": id 2 of the list is empty` + "\n"},
		{[]string{""}, `fulfiller: --fulfiller "": id 1 of the list is empty` + "\n"},
		{[]string{"ful-a,ful-b", "ful-a"}, `fulfiller: --fulfiller "ful-a,ful-b,ful-a": ful-a is listed twice` + "\n"},
	} {
		args := []string{"approve", "--gateway", "ws://127.0.0.1:1", "--id", "alice"}
		for _, l := range tc.list {
			args = append(args, "--fulfiller", l)
		}
		out, errOut, code := cli(t, "", args...)
		if code != 2 || errOut != tc.want || out != "" {
			t.Errorf("%q: code %d stdout %q stderr %q, want %q", tc.list, code, out, errOut, tc.want)
		}
	}
}

// approve --fulfiller a,b --fulfiller c follows the three members of a
// group: a prompt from the third is shown and answered to it.
func TestApproveFollowsAGroup(t *testing.T) {
	for _, name := range []string{"ID", "TOKEN", "CONFIG", "FULFILLER", "AUTO", "COUNT", "GATEWAY"} {
		t.Setenv(envName(strings.ToLower(name)), "")
		os.Unsetenv(envName(strings.ToLower(name)))
	}
	srv, err := space.New(space.Config{Tokens: map[string][]agent.Capability{
		"fulfiller-token": {{Kind: "mcp/*"}, {Kind: "chat"}},
		"human-token":     {{Kind: "mcp/response"}, {Kind: "chat"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	root := newRootCmd()
	root.SetArgs([]string{"approve", "--gateway", srv.URL(), "--token", "human-token", "--id", "alice",
		"--fulfiller", "ful-a, ful-b", "--fulfiller", "ful-c", "--auto", "accept", "--count", "1", "--log-level", "error"})
	var screen spacetest.Screen
	root.SetOut(&screen)
	root.SetErr(&screen)
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	spacetest.WaitText(t, "approve's greeting", screen.String, "Waiting for approval requests from ful-a, ful-b, ful-c.")

	member, err := agent.Dial(ctx, agent.Config{URL: srv.URL(), ID: "ful-c", Token: "fulfiller-token"})
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	answers := member.Subscribe(agent.SubscribeOptions{Kinds: []string{agent.KindResponse}, All: true})
	defer answers.Close()
	params := `{"name":"write_file","arguments":{"path":"/srv/prod/motd"}}`
	digest, _ := approval.CallDigest("tools/call", json.RawMessage(params))
	prompt, err := member.Send(ctx, agent.Envelope{To: []string{"alice"}, Kind: agent.KindRequest,
		Payload: json.RawMessage(`{"jsonrpc":"2.0","id":1,"method":"elicitation/create","params":{"message":"m","requestedSchema":{"type":"object","properties":{"approve":{"type":"boolean"}},"required":["approve"]},"_meta":{"proposal":{"id":"p-1","from":"coder","method":"tools/call","params":` + params + `,"digest":"` + digest + `"}}}}`)})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-answers.C():
		if a.From != "alice" || len(a.To) != 1 || a.To[0] != "ful-c" || a.CorrelationID.First() != prompt.ID || !strings.Contains(string(a.Payload), `"action":"accept"`) {
			t.Errorf("answer %+v %s", a, a.Payload)
		}
	case <-ctx.Done():
		t.Fatalf("no answer to ful-c's prompt\n%s", screen.String())
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("approve: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("approve did not stop after --count 1")
	}
}
