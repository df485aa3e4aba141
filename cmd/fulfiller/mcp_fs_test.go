//go:build unix

package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mewkit/fulfiller/internal/logbuf"
	"github.com/mewkit/fulfiller/internal/testenv"
)

// fsVersion is the reference filesystem server these tests run, pinned:
// the one agent/mcpfront's tests run, from the same npm cache.
const fsVersion = "2026.8.31"

// npmFS is the one install of server-filesystem the tests share.
var npmFS struct {
	once  sync.Once
	entry string
	why   string // set when it is missing
}

// npmFilesystem installs @modelcontextprotocol/server-filesystem@fsVersion
// with npm into the user's cache (once per version: agent/mcpfront's
// tests use the same directory) and returns its entry point. No node or
// npm, or an install that fails, is Missing: a failure under CI.
func npmFilesystem(t *testing.T) string {
	t.Helper()
	npmFS.once.Do(func() { npmFS.entry, npmFS.why = installFilesystem() })
	if npmFS.why != "" {
		testenv.Missing(t, "%s", npmFS.why)
	}
	return npmFS.entry
}

func installFilesystem() (entry, why string) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", "no cache directory for npm packages: " + err.Error()
	}
	dir := filepath.Join(cache, "fulfiller-test", "npm", "server-filesystem-"+fsVersion)
	entry = filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-filesystem", "dist", "index.js")
	if _, err := exec.LookPath("node"); err != nil {
		return "", "node (20 or later) is not installed: " + err.Error()
	}
	if _, err := os.Stat(entry); err == nil {
		return entry, ""
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", "npm is not installed: " + err.Error()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err.Error()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, npm, "install", "--prefix", dir, "--no-audit", "--no-fund", "--no-save",
		"@modelcontextprotocol/server-filesystem@"+fsVersion).CombinedOutput()
	if err != nil {
		return "", "npm could not install @modelcontextprotocol/server-filesystem@" + fsVersion + ": " + err.Error() + "\n" + string(out)
	}
	if _, err := os.Stat(entry); err != nil {
		return "", "npm installed @modelcontextprotocol/server-filesystem@" + fsVersion + " without " + entry + ": " + err.Error()
	}
	return entry, ""
}

// fsRig is `fulfiller mcp` (the binary, stdio) with the starter policy
// `fulfiller mcp init --root Root` wrote, in front of the real
// server-filesystem serving Root and Other (outside the working tree).
type fsRig struct {
	Root, Other, Log string
	cs               *mcp.ClientSession
}

// realPath is dir with its symlinks resolved: server-filesystem resolves
// the paths it is given, and the policy compares them as written.
func realPath(t *testing.T, dir string) string {
	t.Helper()
	p, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Revisions of the MCP clients the tests run: 2025-11-25 is asked
// (elicitation/create) while its call is held; 2026-07-28 answers
// input_required and retries its call (multi-round-trip).
const (
	rev20251125 = "2025-11-25"
	rev20260728 = "2026-07-28"
)

// startFS starts the rig with a go-sdk client of opts speaking revision.
func startFS(t *testing.T, revision string, opts *mcp.ClientOptions) *fsRig {
	t.Helper()
	entry := npmFilesystem(t)
	tmp := realPath(t, t.TempDir())
	r := &fsRig{Root: filepath.Join(tmp, "tree"), Other: filepath.Join(tmp, "other"), Log: filepath.Join(tmp, "decisions.jsonl")}
	for _, d := range []string{r.Root, r.Other} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range map[string]string{"hello.txt": "hello from a real file\n", ".env": "API_KEY=s3cret\n"} {
		if err := os.WriteFile(filepath.Join(r.Root, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := append(os.Environ(), "XDG_CONFIG_HOME="+filepath.Join(tmp, "config"), "XDG_STATE_HOME="+filepath.Join(tmp, "xdgstate"))
	initCmd := exec.Command(fulfillerBinary(t), "mcp", "init", "--root", r.Root)
	initCmd.Env = env
	if out, err := initCmd.CombinedOutput(); err != nil {
		t.Fatalf("fulfiller mcp init --root %s: %v\n%s", r.Root, err, out)
	}
	cmd := exec.Command(fulfillerBinary(t), "mcp", "--decision-log", r.Log, "--name", "fs", "--", "node", entry, r.Root, r.Other)
	cmd.Env = env
	stderr := &logbuf.Buffer{}
	cmd.Stderr = stderr
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("fulfiller mcp's stderr:\n%s", stderr.String())
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "fs-client", Version: "1.0"}, opts).Connect(ctx, &mcp.CommandTransport{Command: cmd},
		&mcp.ClientSessionOptions{ProtocolVersion: revision})
	if err != nil {
		t.Fatalf("connect to fulfiller mcp: %v", err)
	}
	if got := cs.InitializeResult().ProtocolVersion; got != revision {
		t.Fatalf("fulfiller mcp speaks %s to a client of %s", got, revision)
	}
	t.Cleanup(func() { _ = cs.Close() })
	r.cs = cs
	return r
}

func (r *fsRig) call(t *testing.T, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	return (&mcpRig{cs: r.cs}).call(t, name, args)
}

// refused says whether res is fulfiller's refusal with reason and text.
func refused(res *mcp.CallToolResult, reason, message string) bool {
	return res.IsError && res.Meta["fulfiller/reason"] == reason && resultText(res) == "fulfiller refused this call ("+reason+"): "+message
}

func fileIs(t *testing.T, path, want string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil || string(b) != want {
		t.Errorf("%s: %q, %v; want %q", path, b, err, want)
	}
}

// The real @modelcontextprotocol/server-filesystem behind `fulfiller mcp`
// with the starter policy, as a user sets it up (docs/mcp.md): reads and
// writes inside the working tree run, a secret is refused without its
// content, a write outside the tree asks @caller (accept runs it, decline
// leaves the file untouched), and every decision-log line names the
// call's client, server and JSON-RPC id. Under both revisions of the
// client: 2025-11-25 asked while its call is held, 2026-07-28 through
// input_required and its retry.
func TestMCPFilesystemStarterPolicy(t *testing.T) {
	t.Parallel()
	for _, rev := range []string{rev20251125, rev20260728} {
		t.Run(rev, func(t *testing.T) {
			t.Parallel()
			testFilesystemStarterPolicy(t, rev)
		})
	}
}

func testFilesystemStarterPolicy(t *testing.T, revision string) {
	var answer atomic.Pointer[mcp.ElicitResult]
	var asked atomic.Int32
	r := startFS(t, revision, &mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		asked.Add(1)
		return answer.Load(), nil
	}})

	list, err := r.cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range list.Tools {
		names = append(names, tl.Name)
	}
	for _, want := range []string{"read_text_file", "write_file", "move_file", "list_allowed_directories"} {
		if !slices.Contains(names, want) {
			t.Errorf("tools/list lacks %s: %v", want, names)
		}
	}

	hello := filepath.Join(r.Root, "hello.txt")
	if res := r.call(t, "read_text_file", map[string]any{"path": hello}); res.IsError || resultText(res) != "hello from a real file\n" {
		t.Errorf("read inside the tree: isError %v, %q; want the file's content", res.IsError, resultText(res))
	}
	made := filepath.Join(r.Root, "made.txt")
	if res := r.call(t, "write_file", map[string]any{"path": made, "content": "made by the agent"}); res.IsError {
		t.Errorf("write inside the tree: %q; want it run", resultText(res))
	}
	fileIs(t, made, "made by the agent")

	dotenv := filepath.Join(r.Root, ".env")
	res := r.call(t, "read_text_file", map[string]any{"path": dotenv})
	if !res.IsError || res.Meta["fulfiller/reason"] != "policy" || !strings.HasPrefix(resultText(res), "fulfiller refused this call (policy): "+dotenv+" is a secret (") || strings.Contains(resultText(res), "s3cret") {
		t.Errorf("read of .env: isError %v, %q, _meta %v; want refused (policy), the secret not returned", res.IsError, resultText(res), res.Meta)
	}
	if asked.Load() != 0 {
		t.Errorf("%d prompts before any call asked @caller", asked.Load())
	}

	outside := filepath.Join(r.Other, "out.txt")
	answer.Store(&mcp.ElicitResult{Action: "decline"})
	res = r.call(t, "write_file", map[string]any{"path": outside, "content": "declined"})
	if !refused(res, "disagree", "@caller declined") || asked.Load() != 1 {
		t.Errorf("declined write outside the tree: isError %v, %q, _meta %v after %d prompts; want disagree after 1", res.IsError, resultText(res), res.Meta, asked.Load())
	}
	if _, err := os.Stat(outside); !os.IsNotExist(err) {
		t.Errorf("%s after a declined write: %v; want it absent", outside, err)
	}
	answer.Store(&mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}})
	if res := r.call(t, "write_file", map[string]any{"path": outside, "content": "approved"}); res.IsError || asked.Load() != 2 {
		t.Errorf("approved write outside the tree: %q after %d prompts; want it run after 2", resultText(res), asked.Load())
	}
	fileIs(t, outside, "approved")

	// Every line of every call names it: front_end, proposal_id, and
	// the MCP call's client, server, rpc_id (DESIGN: "its decision log
	// lines carry front_end, client, server, tool and the outcome"), the
	// same on every line of a proposal, and no two proposals share an
	// rpc_id.
	// The client leaves; fulfiller mcp ends (CommandTransport's Close
	// waits for it), its log whole: a fulfilled line follows the
	// result it relays.
	if err := r.cs.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	lines := (&mcpRig{Log: r.Log}).lines(t)
	rpcIDs := map[string]string{} // proposal → rpc_id
	stages := map[string][]string{}
	for _, l := range lines {
		pid, _ := l["proposal_id"].(string)
		id, _ := json.Marshal(l["rpc_id"])
		if l["front_end"] != "mcp" || pid == "" || l["client"] != "fs-client" || l["server"] != "fs" || l["rpc_id"] == nil {
			t.Errorf("line %v of %v: front_end %v, client %v, server %v, rpc_id %v; want mcp, fs-client, fs, an id",
				l["stage"], pid, l["front_end"], l["client"], l["server"], l["rpc_id"])
		}
		if prev, ok := rpcIDs[pid]; ok && prev != string(id) {
			t.Errorf("proposal %s: rpc_id %s, then %s", pid, prev, id)
		}
		rpcIDs[pid] = string(id)
		stages[pid] = append(stages[pid], l["stage"].(string))
	}
	seen := map[string]bool{}
	for _, id := range rpcIDs {
		if seen[id] {
			t.Errorf("two proposals have rpc_id %s", id)
		}
		seen[id] = true
	}
	var got []string
	for _, s := range stages {
		got = append(got, strings.Join(s, ","))
	}
	slices.Sort(got)
	want := []string{
		"decided,escalated,answered,approved,fulfilling,fulfilled",
		"decided,escalated,answered,rejected",
		"decided,fulfilling,fulfilled",
		"decided,fulfilling,fulfilled",
		"decided,rejected",
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the calls' stages:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A client that declared no elicitation cannot be asked: the write
// outside the tree the starter policy asks @caller about is refused,
// incapable, and the file is not written.
func TestMCPFilesystemClientWithoutElicitation(t *testing.T) {
	t.Parallel()
	r := startFS(t, rev20251125, nil)
	outside := filepath.Join(r.Other, "out.txt")
	res := r.call(t, "write_file", map[string]any{"path": outside, "content": "x"})
	if !refused(res, "incapable", "this client cannot ask you: it did not declare elicitation support, and the policy asks @caller") {
		t.Errorf("write outside the tree without elicitation: isError %v, %q, _meta %v; want incapable", res.IsError, resultText(res), res.Meta)
	}
	if _, err := os.Stat(outside); !os.IsNotExist(err) {
		t.Errorf("%s after an incapable write: %v; want it absent", outside, err)
	}
}
