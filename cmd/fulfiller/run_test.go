//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/internal/proposer"
	"github.com/mewkit/fulfiller/internal/space"
)

// TestRunBinaryAnswersPendingWorkOnSIGTERM builds the real binary, runs
// `fulfiller run` against an in-process space as an operator would, leaves a
// proposal waiting for a human who never answers, and sends SIGTERM: the
// proposer must get reject "other" with an explanation, and the process must
// exit 0.
func TestRunBinaryAnswersPendingWorkOnSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "fulfiller")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	policy := filepath.Join(dir, "policy.rego")
	if err := os.WriteFile(policy, []byte(`package fulfiller

decision := {"action": "escalate", "message": "a human decides"}
`), 0o644); err != nil {
		t.Fatal(err)
	}

	srv, err := space.New(space.Config{Tokens: map[string][]agent.Capability{
		"fulfiller-token": {{Kind: "mcp/*"}, {Kind: "chat"}},
		"coder-token":     {{Kind: "mcp/proposal"}, {Kind: "mcp/withdraw"}, {Kind: "chat"}},
		"human-token":     {{Kind: "mcp/response"}, {Kind: "chat"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	join := func(id, token string) *agent.Client {
		c, err := agent.Dial(ctx, agent.Config{URL: srv.URL(), ID: id, Token: token})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// A human who is present (so the escalation waits) but never answers;
	// the tool is named by `to`, so no discovery is needed.
	join("alice", "human-token")
	join("fs", "human-token")

	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "run", "--gateway", srv.URL(), "--policy", policy, "--approvers", "alice", "--log-format", "json")
	cmd.Env = append(os.Environ(), "FULFILLER_TOKEN=fulfiller-token")
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitUntilTrue(t, "the fulfiller joins", func() bool { return slices.Contains(srv.Participants(), "fulfiller") })

	coder := join("coder", "coder-token")
	prop := proposer.New(coder)
	sub := coder.Subscribe(agent.SubscribeOptions{All: true})
	go func() {
		for env := range sub.C() {
			prop.Observe(env)
		}
	}()
	frames, stopTap := srv.Tap(256)
	defer stopTap()
	id, err := prop.Propose(ctx, "p-wait", []string{"fs"}, json.RawMessage(`{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/x"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for asked := false; !asked; {
		select {
		case f := <-frames:
			asked = bytes.Contains(f, []byte(`"method":"elicitation/create"`)) && bytes.Contains(f, []byte(`"to":["alice"]`))
		case <-ctx.Done():
			t.Fatal("alice was never asked")
		}
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	out, err := prop.Wait(ctx, id)
	if err != nil || !out.Rejected || out.Reason != "other" {
		t.Fatalf("after SIGTERM the proposer got %+v (%v), want reject other", out, err)
	}
	if chat := prop.WaitChat(ctx, id); chat != "fulfiller is shutting down; propose again later" {
		t.Errorf("chat %q", chat)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("fulfiller run exited with %v after SIGTERM, want 0\n%s", err, stderr.String())
	}
	if strings.Contains(stderr.String(), "fulfiller-token") {
		t.Error("the token appears in the logs")
	}
}

func waitUntilTrue(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
