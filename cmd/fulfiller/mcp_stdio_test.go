//go:build unix

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mewkit/fulfiller/internal/logbuf"
	"github.com/mewkit/fulfiller/internal/toolserver"
)

// mcpFilesEnv, in this test binary's environment, makes it an MCP
// server over stdio instead of the tests: three file tools on the
// directory it names (read_file, write_file, delete_path), for
// `fulfiller mcp` to stand in front of. It is checked in init, before
// TestMain: the upstream inherits the fulfiller's environment, which
// may make the test binary the fulfiller (asFulfiller).
const mcpFilesEnv = "FULFILLER_TEST_MCP_FILES"

func init() {
	if dir := os.Getenv(mcpFilesEnv); dir != "" {
		os.Exit(runFileServer(dir))
	}
}

// runFileServer serves the file tools on dir over stdio.
func runFileServer(dir string) int {
	path := func(raw json.RawMessage) (string, error) {
		var a struct {
			Path string `json:"path"`
		}
		if json.Unmarshal(raw, &a) != nil || a.Path == "" || strings.Contains(a.Path, "..") {
			return "", errors.New("path must be a file name in the directory")
		}
		return filepath.Join(dir, a.Path), nil
	}
	schema := map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}, "content": map[string]any{"type": "string"}}, "required": []string{"path"}}
	tools := []toolserver.Tool{
		{Name: "read_file", Description: "Read a file", InputSchema: schema, Annotations: map[string]any{"readOnlyHint": true},
			Call: func(_ context.Context, raw json.RawMessage) (string, error) {
				p, err := path(raw)
				if err != nil {
					return "", err
				}
				b, err := os.ReadFile(p)
				return string(b), err
			}},
		{Name: "write_file", Description: "Write a file", InputSchema: schema, Annotations: map[string]any{"readOnlyHint": false, "destructiveHint": false},
			Call: func(_ context.Context, raw json.RawMessage) (string, error) {
				p, err := path(raw)
				if err != nil {
					return "", err
				}
				var a struct {
					Content string `json:"content"`
				}
				_ = json.Unmarshal(raw, &a)
				return "written", os.WriteFile(p, []byte(a.Content), 0o644)
			}},
		{Name: "delete_path", Description: "Delete a file", InputSchema: schema, Annotations: map[string]any{"readOnlyHint": false, "destructiveHint": true},
			Call: func(_ context.Context, raw json.RawMessage) (string, error) {
				p, err := path(raw)
				if err != nil {
					return "", err
				}
				return "deleted", os.Remove(p)
			}},
	}
	s := toolserver.NewMCP(&mcp.Implementation{Name: "files", Version: "1.0.0"}, tools...)
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// mcpPolicy is the e2e tests' policy: reads run, writes are refused,
// deletes ask the person at the client.
const mcpPolicy = `package fulfiller

import rego.v1

default decision := {"action": "reject", "reason": "policy", "message": "no rule allows this"}

decision := {"action": "fulfill"} if input.tool.name == "read_file"

decision := {"action": "reject", "reason": "policy", "message": "writes are not allowed here"} if input.tool.name == "write_file"

decision := {"action": "escalate", "approvers": ["@caller"], "message": "a delete needs you"} if input.tool.name == "delete_path"
`

// mcpRig is `fulfiller mcp` (the binary) in front of the file tools on
// Dir, with a go-sdk client on its stdio.
type mcpRig struct {
	Dir, Log string
	cs       *mcp.ClientSession
}

// startMCP starts `fulfiller mcp -- <file tools>` with the client opts.
func startMCP(t *testing.T, opts *mcp.ClientOptions) *mcpRig {
	t.Helper()
	tmp := t.TempDir()
	r := &mcpRig{Dir: filepath.Join(tmp, "files"), Log: filepath.Join(tmp, "decisions.jsonl")}
	if err := os.Mkdir(r.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.Dir, "a.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	policy := filepath.Join(tmp, "policy.rego")
	if err := os.WriteFile(policy, []byte(mcpPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(fulfillerBinary(t), "mcp", "--policy", policy, "--state", filepath.Join(tmp, "state"),
		"--decision-log", r.Log, "--name", "files", "--", "env", mcpFilesEnv+"="+r.Dir, exe)
	// The user's directories are the test's: no policy of the machine's
	// user is read.
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+filepath.Join(tmp, "config"), "XDG_STATE_HOME="+filepath.Join(tmp, "xdgstate"))
	stderr := &logbuf.Buffer{}
	cmd.Stderr = stderr
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("fulfiller mcp's stderr:\n%s", stderr.String())
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e-client", Version: "1.0"}, opts).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to fulfiller mcp: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	r.cs = cs
	return r
}

func (r *mcpRig) call(t *testing.T, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := r.cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

func resultText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// lines are the decision log's lines, decoded.
func (r *mcpRig) lines(t *testing.T) []map[string]any {
	t.Helper()
	f, err := os.Open(r.Log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("decision log line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func TestMCPStdioDecidesEveryCall(t *testing.T) {
	t.Parallel() // its own processes and directories, mostly waiting on them
	r := startMCP(t, nil)
	ctx := context.Background()

	list, err := r.cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range list.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"delete_path", "read_file", "write_file"}) {
		t.Errorf("tools/list: %v, want the upstream's three tools", names)
	}

	if res := r.call(t, "read_file", map[string]any{"path": "a.txt"}); res.IsError || resultText(res) != "hello" {
		t.Errorf("read_file: isError %v, %q; want the file's content", res.IsError, resultText(res))
	}

	res := r.call(t, "write_file", map[string]any{"path": "a.txt", "content": "evil"})
	if want := "fulfiller refused this call (policy): writes are not allowed here"; !res.IsError || resultText(res) != want || res.Meta["fulfiller/reason"] != "policy" {
		t.Errorf("write_file: isError %v, %q, _meta %v; want isError, %q, reason policy", res.IsError, resultText(res), res.Meta, want)
	}
	if b, _ := os.ReadFile(filepath.Join(r.Dir, "a.txt")); string(b) != "hello" {
		t.Errorf("a.txt is %q after a refused write", b)
	}

	// This client declared no elicitation: it cannot be asked.
	res = r.call(t, "delete_path", map[string]any{"path": "a.txt"})
	if !res.IsError || res.Meta["fulfiller/reason"] != "incapable" ||
		resultText(res) != "fulfiller refused this call (incapable): this client cannot ask you: it did not declare elicitation support, and the policy asks @caller" {
		t.Errorf("delete_path without elicitation: isError %v, %q, _meta %v; want incapable", res.IsError, resultText(res), res.Meta)
	}
	if _, err := os.Stat(filepath.Join(r.Dir, "a.txt")); err != nil {
		t.Errorf("a.txt after a refused delete: %v", err)
	}

	// The decision log: every line is the MCP front end's.
	decided, lines := 0, r.lines(t)
	for _, l := range lines {
		if l["front_end"] != "mcp" {
			t.Errorf("decision log line %v: front_end %v, want mcp", l["stage"], l["front_end"])
		}
		if l["stage"] != "decided" {
			continue
		}
		decided++
		in, _ := l["input"].(map[string]any)
		tool, _ := in["tool"].(map[string]any)
		proposer, _ := in["proposer"].(map[string]any)
		client, _ := proposer["client"].(map[string]any)
		if in["front_end"] != "mcp" || tool["server"] != "files" || proposer["id"] != "local" || client["name"] != "e2e-client" {
			t.Errorf("decided line: input.front_end %v, tool.server %v, proposer %v; want mcp, files, local with its clientInfo", in["front_end"], tool["server"], proposer)
		}
	}
	if decided != 3 || len(lines) != 7 {
		t.Errorf("%d lines, %d decided; want 7 (3 decided, fulfilling, fulfilled, 2 rejected)", len(lines), decided)
	}
}

// caller answers every elicitation with result, counting them.
func callerAnswers(result *mcp.ElicitResult, asked *int) *mcp.ClientOptions {
	return &mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		*asked++
		return result, nil
	}}
}

func TestMCPStdioAsksTheCaller(t *testing.T) {
	t.Parallel() // its own processes and directories, mostly waiting on them
	t.Run("accept", func(t *testing.T) {
		t.Parallel()
		asked := 0
		r := startMCP(t, callerAnswers(&mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, &asked))
		res := r.call(t, "delete_path", map[string]any{"path": "a.txt"})
		if res.IsError || resultText(res) != "deleted" || asked != 1 {
			t.Fatalf("delete_path approved: isError %v, %q after %d prompts", res.IsError, resultText(res), asked)
		}
		if _, err := os.Stat(filepath.Join(r.Dir, "a.txt")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a.txt after an approved delete: %v", err)
		}
	})
	t.Run("decline", func(t *testing.T) {
		t.Parallel()
		asked := 0
		r := startMCP(t, callerAnswers(&mcp.ElicitResult{Action: "decline"}, &asked))
		res := r.call(t, "delete_path", map[string]any{"path": "a.txt"})
		if !res.IsError || res.Meta["fulfiller/reason"] != "disagree" || resultText(res) != "fulfiller refused this call (disagree): @caller declined" || asked != 1 {
			t.Fatalf("delete_path declined: isError %v, %q, _meta %v after %d prompts", res.IsError, resultText(res), res.Meta, asked)
		}
		if _, err := os.Stat(filepath.Join(r.Dir, "a.txt")); err != nil {
			t.Errorf("a.txt after a declined delete: %v", err)
		}
	})
}

func TestMCPBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"mcp"}, "no server to stand in front of"},
		{[]string{"mcp", "--"}, "no COMMAND after --"},
		{[]string{"mcp", "--approval-timeout", "0s", "--", "x"}, "--approval-timeout 0s: must be positive"},
		{[]string{"mcp", "--state", "nats://user:secret@localhost:4222", "--", "x"}, "carries credentials; use --state-creds FILE instead"},
		{[]string{"mcp", "--state", "memory", "--state-creds", "/nonexistent", "--", "x"}, "--state-creds is only for a nats:// or tls:// --state"},
		{[]string{"mcp", "serve", "--listen", "127.0.0.1:0", "--upstream", "fs=cmd:x", "--state", "nats://127.0.0.1:1", "--state-creds", "/nonexistent/creds"}, "--state-creds"},
		{[]string{"mcp", "--tool-metadata", "/nonexistent/meta.yaml", "--state", "memory", "--", "x"}, "--tool-metadata"},
		{[]string{"mcp", "serve", "--upstream", "fs=cmd:x"}, "--listen is required"},
		{[]string{"mcp", "serve", "--listen", "0.0.0.0:0", "--upstream", "fs=cmd:x"}, "--listen"},
	} {
		root := newRootCmd()
		var stderr strings.Builder
		root.SetOut(&stderr)
		root.SetErr(&stderr)
		root.SetArgs(c.args)
		err := root.Execute()
		if exitCode(err) != 2 || err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: exit %d, %v; want exit 2 naming %q", c.args, exitCode(err), err, c.want)
		}
	}
}
