//go:build unix

package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/testenv"

	"github.com/creack/pty"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approver"
	"github.com/mewkit/fulfiller/internal/proposer"
	"github.com/mewkit/fulfiller/internal/space"
	"github.com/mewkit/fulfiller/internal/spacetest"
	"github.com/mewkit/fulfiller/internal/toolserver"
)

// TestApproveOnPTY runs the two commands a human sees, in process, against
// an in-process space: `fulfiller run` with a policy that escalates writes
// to alice (whose answers must be signed), and `fulfiller approve` as alice
// on a pseudo-terminal. The card renders on the terminal, one key press
// approves, the signed answer is accepted, and the write happens.
func TestApproveOnPTY(t *testing.T) {
	master, slave, err := pty.Open()
	if err != nil {
		testenv.Missing(t, "no pseudo-terminal here: %v", err)
	}
	ptmx, tty := pollable(t, master), pollable(t, slave)
	for _, name := range []string{"ID", "TOKEN", "KEY", "CONFIG", "APPROVERS", "APPROVER_KEYS", "POLICY", "DATA", "AUTO", "COLOR", "GATEWAY"} {
		t.Setenv("FULFILLER_"+name, "")
		os.Unsetenv("FULFILLER_" + name)
	}

	srv, err := space.New(space.Config{Tokens: map[string][]agent.Capability{
		"fulfiller-token": {{Kind: "mcp/*"}, {Kind: "chat"}},
		"coder-token":     {{Kind: "mcp/proposal"}, {Kind: "mcp/withdraw"}, {Kind: "chat"}},
		"tool-token":      {{Kind: "mcp/response"}, {Kind: "chat"}},
		"human-token":     {{Kind: "mcp/response"}, {Kind: "chat"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		tty.Close()
		ptmx.Close()
		wg.Wait()
		srv.Close()
	})
	join := func(id, token string) *agent.Client {
		c, err := agent.Dial(ctx, agent.Config{URL: srv.URL(), ID: id, Token: token})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	fs := join("fs", "tool-token")
	files := toolserver.NewFiles(nil)
	ts := toolserver.New(fs, nil, files.Tools()...)
	fsSub := fs.Subscribe(agent.SubscribeOptions{Kinds: []string{agent.KindRequest}})
	wg.Add(1)
	go func() { defer wg.Done(); _ = ts.Serve(ctx, fsSub.C()) }()

	dir := t.TempDir()
	keyFile := filepath.Join(dir, "alice.key")
	line, err := approver.WriteKeyFile(keyFile, "alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	policy := write("policy.rego", `package fulfiller

decision := {"action": "escalate", "message": "production writes need a human", "editable": ["path"]} if input.tool.name == "write_file"

default decision := {"action": "reject", "reason": "policy"}
`)
	keys := write("approvers.keys", "# on-call approvers\n"+line+"\n")

	command := func(in io.Reader, out io.Writer, args ...string) {
		root := newRootCmd()
		root.SetArgs(args)
		root.SetIn(in)
		root.SetOut(out)
		root.SetErr(io.Discard)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := root.ExecuteContext(ctx); err != nil {
				t.Errorf("fulfiller %s: %v", args[0], err)
			}
		}()
	}
	command(strings.NewReader(""), io.Discard, "run", "--gateway", srv.URL(), "--token", "fulfiller-token",
		"--policy", policy, "--approvers", "alice", "--approver-keys", keys, "--log-level", "error", "--state", filepath.Join(t.TempDir(), "state"))
	var screen syncBuffer
	wg.Add(1)
	go func() { defer wg.Done(); _, _ = io.Copy(&screen, ptmx) }()
	command(tty, tty, "approve", "--gateway", srv.URL(), "--token", "human-token", "--id", "alice", "--key", keyFile, "--color", "never")
	waitText(t, "approve's greeting", screen.String, "Waiting for approval requests from fulfiller.")
	poll.Until(t, "the fulfiller to join", func() bool { return slices.Contains(srv.Participants(), "fulfiller") })

	coder := join("coder", "coder-token")
	prop := proposer.New(coder)
	sub := coder.Subscribe(agent.SubscribeOptions{All: true})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for env := range sub.C() {
			prop.Observe(env)
		}
	}()
	id, err := prop.Propose(ctx, "p-motd", nil, json.RawMessage(`{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/srv/prod/motd","content":"maintenance at 18:00"}}}`))
	if err != nil {
		t.Fatal(err)
	}

	waitText(t, "the card", screen.String, "a approve · e edit · d decline · c dismiss · q quit › ")
	for _, want := range []string{
		"▌ approval requested — p-motd",
		"proposer   coder",
		"server     fs",
		"tool       write_file — Write a file, replacing it if it exists",
		`"path": "/srv/prod/motd",`,
		"policy     production writes need a human",
		"editable   path (string)",
		" left)",
	} {
		if !strings.Contains(screen.String(), want) {
			t.Errorf("card lacks %q:\n%s", want, screen.String())
		}
	}
	if _, err := ptmx.Write([]byte("a")); err != nil { // one key, no Enter: raw mode
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	out, err := prop.Wait(wctx, id)
	if err != nil || !out.Fulfilled {
		t.Fatalf("outcome %+v %v\n%s", out, err, screen.String())
	}
	waitText(t, "the confirmation", screen.String, "✓ sent approved — p-motd: coder → write_file on fs")
	if got, _ := files.Read("/srv/prod/motd"); got != "maintenance at 18:00" {
		t.Errorf("file %q", got)
	}
}

type syncBuffer = spacetest.Screen

var waitText = spacetest.WaitText

// pollable returns a non-blocking duplicate of f that Go's poller serves,
// so that closing it ends a read blocked on it; f is closed.
func pollable(t *testing.T, f *os.File) *os.File {
	t.Helper()
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := syscall.SetNonblock(fd, true); err != nil {
		t.Fatal(err)
	}
	return os.NewFile(uintptr(fd), f.Name())
}
