package mcpfront

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/internal/testenv"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// fsVersion is the reference filesystem server the tests run, pinned.
const fsVersion = "2026.8.31"

// npmFilesystem installs @modelcontextprotocol/server-filesystem@fsVersion
// with npm into the user's cache (once per version) and returns its
// entry point. No node or npm, or an install that fails, is Missing: a
// failure under CI.
func npmFilesystem(t *testing.T) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		testenv.Missing(t, "no cache directory for npm packages: %v", err)
	}
	dir := filepath.Join(cache, "fulfiller-test", "npm", "server-filesystem-"+fsVersion)
	entry := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-filesystem", "dist", "index.js")
	if _, err := exec.LookPath("node"); err != nil {
		testenv.Missing(t, "node (20 or later) is not installed: %v", err)
	}
	if _, err := os.Stat(entry); err == nil {
		return entry
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		testenv.Missing(t, "npm is not installed: %v", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		testenv.Missing(t, "%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "install", "--prefix", dir, "--no-audit", "--no-fund", "--no-save",
		"@modelcontextprotocol/server-filesystem@"+fsVersion)
	if out, err := cmd.CombinedOutput(); err != nil {
		testenv.Missing(t, "npm could not install @modelcontextprotocol/server-filesystem@%s: %v\n%s", fsVersion, err, out)
	}
	if _, err := os.Stat(entry); err != nil {
		testenv.Missing(t, "npm installed @modelcontextprotocol/server-filesystem@%s without %s: %v", fsVersion, entry, err)
	}
	return entry
}

func TestReferenceFilesystemServer(t *testing.T) {
	entry := npmFilesystem(t)
	root := t.TempDir()
	if root2, err := filepath.EvalSymlinks(root); err == nil {
		root = root2
	}
	hello := filepath.Join(root, "hello.txt")
	if err := os.WriteFile(hello, []byte("hello from a real file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &rig{t: t, ctx: ctx}
	r.eng = newFakeEngine(map[string]string{
		"read_text_file":           "fulfil",
		"list_allowed_directories": "fulfil",
		"write_file":               "reject:policy:writes need a human",
		"move_file":                "escalate",
	})
	f, err := New(Config{Engine: r.eng}, CommandUpstream("fs", []string{"node", entry, root}, os.Stderr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); r.wg.Wait() })
	r.start(f, "fs", 30*time.Second)

	answer := "accept"
	el := &elicitor{answer: func(context.Context) (*mcp.ElicitResult, error) {
		if answer == "accept" {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, nil
		}
		return &mcp.ElicitResult{Action: "decline"}, nil
	}}
	cs := r.stdioClient("fs", &mcp.ClientOptions{ElicitationHandler: el.handle})
	direct, err := mcp.NewClient(&mcp.Implementation{Name: "direct"}, nil).Connect(ctx, &mcp.CommandTransport{Command: exec.Command("node", entry, root)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()

	// tools/list is the server's.
	got, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, err := direct.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if g, w := jsonOf(t, got.Tools), jsonOf(t, want.Tools); g != w || len(got.Tools) < 10 {
		t.Errorf("tools/list through fulfiller:\n%s\ndirect:\n%s", g, w)
	}
	// An allowed read, relayed as it came.
	res := call(t, cs, "read_text_file", map[string]any{"path": hello})
	if g := jsonOf(t, res); !strings.Contains(g, `"text":"hello from a real file\n"`) || res.IsError {
		t.Errorf("read: %s", g)
	}
	// A rejected write: the file is untouched.
	res = call(t, cs, "write_file", map[string]any{"path": hello, "content": "overwritten"})
	if g := jsonOf(t, res); g != `{"_meta":{"fulfiller/reason":"policy"},"content":[{"type":"text","text":"fulfiller refused this call (policy): writes need a human"}],"isError":true}` {
		t.Errorf("write: %s", g)
	}
	if b, _ := os.ReadFile(hello); string(b) != "hello from a real file\n" {
		t.Errorf("the rejected write changed the file: %q", b)
	}
	// @caller declines a move, then accepts one.
	moved := filepath.Join(root, "moved.txt")
	answer = "decline"
	res = call(t, cs, "move_file", map[string]any{"source": hello, "destination": moved})
	if !strings.Contains(jsonOf(t, res), `"fulfiller/reason":"disagree"`) {
		t.Errorf("declined move: %s", jsonOf(t, res))
	}
	if _, err := os.Stat(hello); err != nil {
		t.Errorf("the declined move ran: %v", err)
	}
	answer = "accept"
	res = call(t, cs, "move_file", map[string]any{"source": hello, "destination": moved})
	if res.IsError {
		t.Errorf("approved move: %s", jsonOf(t, res))
	}
	if _, err := os.Stat(moved); err != nil {
		t.Errorf("the approved move did not run: %v", err)
	}
}
