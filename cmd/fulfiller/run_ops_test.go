//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
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

// TestRunBinaryOperations runs the real binary with --http, --http-token
// (from the environment), --decision-log and --mask, and checks the wiring
// end to end: /readyz turns 200 once joined, the operator API shows the
// pending escalation, SIGHUP reopens a rotated decision log, and on SIGTERM
// the shutdown reject still reaches the log (it is closed after the
// fulfiller has answered everything), masked, before the listener stops.
func TestRunBinaryOperations(t *testing.T) {
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
	if err := os.WriteFile(policy, []byte("package fulfiller\n\ndecision := {\"action\": \"escalate\", \"message\": \"a human decides\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "decisions.jsonl")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

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
	join("alice", "human-token")
	join("fs", "human-token")

	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "run", "--gateway", srv.URL(), "--policy", policy, "--approvers", "alice",
		"--http", addr, "--decision-log", logPath, "--mask", "params.arguments.path", "--log-format", "json")
	cmd.Env = append(os.Environ(), "FULFILLER_TOKEN=fulfiller-token", "FULFILLER_HTTP_TOKEN=op-secret")
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	get := func(path, tok string) (int, string) {
		req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitUntilTrue(t, "/readyz says ready", func() bool { code, _ := get("/readyz", ""); return code == 200 })

	coder := join("coder", "coder-token")
	prop := proposer.New(coder)
	sub := coder.Subscribe(agent.SubscribeOptions{All: true})
	go func() {
		for env := range sub.C() {
			prop.Observe(env)
		}
	}()
	waitUntilTrue(t, "the fulfiller sees the coder", func() bool { return slices.Contains(srv.Participants(), "coder") })
	id, err := prop.Propose(ctx, "p-ops", []string{"fs"}, json.RawMessage(`{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/very/secret"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	waitUntilTrue(t, "the operator API shows the escalation", func() bool {
		code, body := get("/v1/proposals/"+id, "op-secret")
		return code == 200 && strings.Contains(body, `"state": "awaiting_approval"`)
	})
	if code, _ := get("/v1/proposals/"+id, ""); code != 401 {
		t.Fatalf("operator API without the token: %d, want 401", code)
	}

	// logrotate: rename, then SIGHUP. The old file keeps what was written
	// before; the fulfiller starts a new one.
	if err := os.Rename(logPath, logPath+".1"); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntilTrue(t, "a new decision log after SIGHUP", func() bool { _, err := os.Stat(logPath); return err == nil })

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if out, err := prop.Wait(ctx, id); err != nil || !out.Rejected || out.Reason != "other" {
		t.Fatalf("proposer got %+v (%v)", out, err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit %v\n%s", err, stderr.String())
	}
	stages := func(path string) []string {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(raw, []byte("/very/secret")) {
			t.Errorf("masked argument in %s:\n%s", path, raw)
		}
		var out []string
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			var r struct {
				Stage, Reason string
				ProposalID    string `json:"proposal_id"`
			}
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("%s: %v: %s", path, err, line)
			}
			if r.ProposalID != id {
				t.Errorf("record for %q: %s", r.ProposalID, line)
			}
			out = append(out, r.Stage+":"+r.Reason)
		}
		return out
	}
	if got, want := stages(logPath+".1"), []string{"decided:", "escalated:"}; !slices.Equal(got, want) {
		t.Errorf("rotated log: %v, want %v", got, want)
	}
	if got, want := stages(logPath), []string{"rejected:other"}; !slices.Equal(got, want) {
		t.Errorf("new log: %v, want %v", got, want)
	}
	if code, _ := get("/healthz", ""); code != 0 {
		t.Errorf("the listener is still up after exit: %d", code)
	}
	for _, secret := range []string{"fulfiller-token", "op-secret"} {
		if strings.Contains(stderr.String(), secret) {
			t.Errorf("%s appears in the logs", secret)
		}
	}
}
