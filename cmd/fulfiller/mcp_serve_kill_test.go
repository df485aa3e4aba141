//go:build unix

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mewkit/fulfiller/fulfill/state"
	"github.com/mewkit/fulfiller/internal/logbuf"
	"github.com/mewkit/fulfiller/internal/natstest"
	"github.com/mewkit/fulfiller/internal/passkeytest"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/toolserver"
)

// mcpCountEnv, in this test binary's environment, makes it an MCP
// server over stdio with one tool, drop, that appends the table it
// drops to the file it names: the runs of every instance's upstream,
// counted in one place.
const mcpCountEnv = "FULFILLER_TEST_MCP_COUNT"

func init() {
	if path := os.Getenv(mcpCountEnv); path != "" {
		os.Exit(runCountServer(path))
	}
}

func runCountServer(path string) int {
	schema := map[string]any{"type": "object", "properties": map[string]any{"table": map[string]any{"type": "string"}}, "required": []string{"table"}}
	s := toolserver.NewMCP(&mcp.Implementation{Name: "tables", Version: "1.0.0"}, toolserver.Tool{
		Name: "drop", Description: "Drop a table", InputSchema: schema, Annotations: map[string]any{"destructiveHint": true},
		Call: func(_ context.Context, raw json.RawMessage) (string, error) {
			var a struct{ Table string }
			_ = json.Unmarshal(raw, &a)
			f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return "", err
			}
			defer f.Close()
			if _, err := f.WriteString(a.Table + "\n"); err != nil {
				return "", err
			}
			return "dropped " + a.Table, nil
		}})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		return 1
	}
	return 0
}

// mcpDropPolicy asks alice about every drop.
const mcpDropPolicy = `package fulfiller

default decision := {"action": "reject", "reason": "policy", "message": "no rule allows this"}

decision := {"action": "escalate", "approvers": ["alice"], "message": "a drop needs alice"} if input.tool.name == "drop"
`

// serveInstance is one `fulfiller mcp serve` process on a NATS cluster,
// with its own team inbox (alice enrolled with a passkey of her own
// there) and its own copy of the counting tables server.
type serveInstance struct {
	cmd   *exec.Cmd
	url   string // the tables endpoint
	inbox string
	alice *passkeytest.Passkey
	log   string
}

func startServeInstance(t *testing.T, natsURL, policy, counts string) *serveInstance {
	t.Helper()
	tmp := t.TempDir()
	inboxDir := filepath.Join(tmp, "inbox")
	if err := os.Mkdir(inboxDir, 0o700); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	in := &serveInstance{inbox: "http://127.0.0.1:" + port, log: filepath.Join(tmp, "decisions.jsonl")}
	in.alice = passkeytest.New(t, "localhost", "http://localhost:"+port)
	in.alice.Enrol(t, inboxDir, "alice")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	in.cmd = exec.Command(fulfillerBinary(t), "mcp", "serve", "--listen", "127.0.0.1:0", "--policy", policy,
		"--state", natsURL, "--decision-log", in.log, "--inbox", "127.0.0.1:"+port, "--inbox-dir", inboxDir,
		"--upstream", "tables=cmd:env "+mcpCountEnv+"='"+counts+"' '"+exe+"'")
	in.cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+filepath.Join(tmp, "config"), "XDG_STATE_HOME="+filepath.Join(tmp, "xdgstate"))
	stderr, err := in.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := in.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = in.cmd.Process.Kill(); _ = in.cmd.Wait() })
	logs := &logbuf.Buffer{}
	endpoint := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			_, _ = logs.Write([]byte(line + "\n"))
			if url, ok := strings.CutPrefix(line, "  tables: "); ok {
				endpoint <- url
			}
		}
	}()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("fulfiller mcp serve (%s)'s stderr:\n%s", in.inbox, logs.String())
		}
	})
	select {
	case in.url = <-endpoint:
	case <-time.After(60 * time.Second):
		t.Fatal("fulfiller mcp serve did not list the tables endpoint")
	}
	return in
}

// TestMCPServeKilledMidApproval: two `fulfiller mcp serve` processes on
// one NATS server. A client's drop, which the policy asks alice about,
// is held on A; A is killed (SIGKILL) before she answers. The client
// retries on B, which takes the held call over from the dead A (no new
// decision); alice approves it in B's team inbox, signed with her
// passkey; the drop runs exactly once, counted at the tables servers of
// both, and the retry gets its result.
func TestMCPServeKilledMidApproval(t *testing.T) {
	t.Parallel() // its own processes, directories and ports
	cluster, err := natstest.StartCluster(1, "mcp-kill", natstest.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Shutdown)
	m, err := state.ParseMode(cluster.URLs())
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	policy, counts := filepath.Join(tmp, "p.rego"), filepath.Join(tmp, "drops")
	if err := os.WriteFile(policy, []byte(mcpDropPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	a := startServeInstance(t, m.String(), policy, counts)
	b := startServeInstance(t, m.String(), policy, counts)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	drop := func(url string) (*mcp.ClientSession, <-chan *mcp.CallToolResult) {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1.0"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
		if err != nil {
			t.Fatalf("connect to %s: %v", url, err)
		}
		t.Cleanup(func() { _ = cs.Close() })
		out := make(chan *mcp.CallToolResult, 1)
		go func() {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "drop", Arguments: map[string]any{"table": "users"}})
			if err != nil {
				res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "call failed: " + err.Error()}}}
			}
			out <- res
		}()
		return cs, out
	}

	_, first := drop(a.url)
	onA := passkeytest.SignIn(t, a.inbox, "alice", a.alice)
	onA.OpenCard()
	held := ""
	poll.Until(t, "A's decision to ask alice in its log", func() bool {
		for _, l := range decisionLines(t, a.log) {
			if l["stage"] == "decided" {
				held, _ = l["proposal_id"].(string)
				return held != ""
			}
		}
		return false
	})

	if err := a.cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = a.cmd.Wait()
	if res := <-first; !res.IsError {
		t.Fatalf("the call on the killed instance: %q; want it failed", resultText(res))
	}

	_, retry := drop(b.url)
	onB := passkeytest.SignIn(t, b.inbox, "alice", b.alice)
	req := onB.OpenCard()
	select {
	case res := <-retry:
		t.Fatalf("the retry was answered before alice: %q", resultText(res))
	default:
	}
	if code, msg := onB.Answer(req, map[string]any{"action": "accept", "approve": true}); code != 200 {
		t.Fatalf("alice's approval on B: %d %s", code, msg)
	}
	if res := <-retry; res.IsError || resultText(res) != "dropped users" {
		t.Fatalf("the retry after alice's approval: isError %v %q; want the upstream's \"dropped users\"", res.IsError, resultText(res))
	}
	if b, err := os.ReadFile(counts); err != nil || string(b) != "users\n" {
		t.Errorf("the tables servers ran %q (%v); want the one drop, once", b, err)
	}
	// B took A's proposal over: its lines are that proposal's, and it
	// decided nothing itself.
	poll.Until(t, "B's fulfilled line", func() bool {
		for _, l := range decisionLines(t, b.log) {
			if l["stage"] == "fulfilled" {
				return true
			}
		}
		return false
	})
	for _, l := range decisionLines(t, b.log) {
		if l["proposal_id"] != held || l["stage"] == "decided" {
			t.Errorf("B's decision log line %v: want only lines of A's proposal %s, and no decision", l, held)
		}
	}
}

// decisionLines reads a decision log's lines (none while it is not
// there yet).
func decisionLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var l map[string]any
		if line != "" && json.Unmarshal([]byte(line), &l) == nil {
			out = append(out, l)
		}
	}
	return out
}
