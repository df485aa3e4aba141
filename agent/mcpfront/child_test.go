package mcpfront

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/toolserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// childEnv makes the test binary an upstream over stdio instead: "jobs"
// (the go-sdk with the in-repo calculator, a tool that says its pid and
// one that runs until it is cancelled), or "junk" (answers initialize
// and tools/list, then garbage to a tools/call), or "stdout" (writes
// frames to a stdout nobody reads yet: stdoutChild).
const childEnv = "MCPFRONT_TEST_CHILD"

func runChild() int {
	switch os.Getenv(childEnv) {
	case "jobs":
		tools := append(toolserver.Calculator(),
			toolserver.Tool{Name: "pid", Description: "Say the server's pid", InputSchema: map[string]any{"type": "object"},
				Call: func(context.Context, json.RawMessage) (string, error) { return strconv.Itoa(os.Getpid()), nil }},
			toolserver.Tool{Name: "hang", Description: "Run until cancelled", InputSchema: map[string]any{"type": "object"},
				Call: func(ctx context.Context, _ json.RawMessage) (string, error) {
					toolserver.Progress(ctx, 1, 0, "started")
					<-ctx.Done()
					return "", ctx.Err()
				}})
		s := toolserver.NewMCP(&mcp.Implementation{Name: "jobs", Version: "1"}, tools...)
		if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	case "junk":
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			var m struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			_ = json.Unmarshal(sc.Bytes(), &m)
			switch m.Method {
			case "initialize":
				fmt.Printf(`{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"junk","version":"1"}}}`+"\n", m.ID)
			case "tools/list":
				fmt.Printf(`{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"echo","inputSchema":{"type":"object"}}]}}`+"\n", m.ID)
			case "tools/call":
				fmt.Println("this is not JSON-RPC {{{")
			default:
				if len(m.ID) > 0 {
					fmt.Printf(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"method not found"}}`+"\n", m.ID)
				}
			}
		}
		return 0
	case "stdout":
		return stdoutChild()
	}
	return 2
}

// childRig is a Front in front of the test binary as an upstream over
// stdio, started by a --upstream spec as a user would write it.
func childRig(t *testing.T, kind string) *rig {
	t.Helper()
	return childRigWith(t, kind, Config{BackoffMin: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond})
}

// childRigWith is childRig with the Front's cfg (its Engine the rig's).
func childRigWith(t *testing.T, kind string, cfg Config, prepare ...func(*Front)) *rig {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &rig{t: t, ctx: ctx}
	up, err := ParseUpstream(fmt.Sprintf(`%s=cmd:env %s=%s '%s' -test.run=^$`, kind, childEnv, kind, os.Args[0]), os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	r.eng = newFakeEngine(map[string]string{"pid": "fulfil", "hang": "fulfil", "add": "fulfil", "echo": "fulfil"})
	cfg.Engine = r.eng
	f, err := New(cfg, up)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range prepare {
		p(f)
	}
	t.Cleanup(func() {
		cancel()
		r.wg.Wait()
	})
	r.start(f, kind, 20*time.Second)
	return r
}

func (r *rig) stdioClient(name string, opts *mcp.ClientOptions) *mcp.ClientSession {
	r.t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		_ = r.front.ServeStdio(r.ctx, name, st)
	}()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client"}, opts).Connect(r.ctx, ct, r.sessionOpts())
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func text(res *mcp.CallToolResult) string {
	if len(res.Content) != 1 {
		return fmt.Sprintf("%d contents", len(res.Content))
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); ok {
		return tc.Text
	}
	return fmt.Sprintf("%T", res.Content[0])
}

func TestUpstreamKilledMidCall(t *testing.T) {
	r := childRig(t, "jobs")
	progressed := make(chan struct{}, 8)
	cs := r.stdioClient("jobs", &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
		if req.Params.ProgressToken == "p1" && req.Params.Message == "started" {
			progressed <- struct{}{}
		}
	}})
	pid1, err := strconv.Atoi(text(call(t, cs, "pid", nil)))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		params := &mcp.CallToolParams{Name: "hang", Arguments: map[string]any{}}
		params.SetProgressToken("p1")
		res, err := cs.CallTool(context.Background(), params)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	waitFor(t, progressed) // the upstream's progress reached the client, under its own token
	if err := syscall.Kill(pid1, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var res *mcp.CallToolResult
	select {
	case res = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the call on the upstream that died never ended")
	}
	if res == nil || !res.IsError || !strings.HasPrefix(text(res), "upstream jobs failed during the call: ") || jsonOf(t, res.Meta) != `{"fulfiller/upstream":"jobs"}` {
		t.Fatalf("result %s", jsonOf(t, res))
	}
	// It is started again, and the next call runs on the new process.
	deadline := time.Now().Add(20 * time.Second)
	for {
		res := call(t, cs, "pid", nil)
		if !res.IsError {
			pid2, err := strconv.Atoi(text(res))
			if err != nil || pid2 == pid1 {
				t.Fatalf("after the restart: %s", jsonOf(t, res))
			}
			break
		}
		// Until the restart: the old session seen ending, or none yet.
		if !strings.HasPrefix(text(res), "upstream jobs is not running") && !strings.HasPrefix(text(res), "upstream jobs failed during the call: ") ||
			time.Now().After(deadline) {
			t.Fatalf("while restarting: %s", jsonOf(t, res))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if g := text(call(t, cs, "add", map[string]any{"a": 2, "b": 3})); g != "5" {
		t.Errorf("add: %s", g)
	}
}

// A call made just after the upstream died, while fulfiller waits out
// the backoff before it starts it again, waits for the restart and is
// answered by the new process, not refused.
func TestCallWaitsForTheRestart(t *testing.T) {
	// A backoff far longer than the call takes to arrive: the call
	// lands in it.
	r := childRigWith(t, "jobs", Config{BackoffMin: time.Second, BackoffMax: 2 * time.Second})
	cs := r.stdioClient("jobs", nil)
	pid1 := killJobs(t, cs)
	u := r.front.ups["jobs"]
	if !poll.Within(10*time.Second, func() bool {
		u.mu.Lock()
		defer u.mu.Unlock()
		return u.cs == nil
	}) {
		t.Fatal("the upstream's end was never seen")
	}
	res := call(t, cs, "pid", nil)
	pid2, err := strconv.Atoi(text(res))
	if res.IsError || err != nil || pid2 == pid1 {
		t.Fatalf("a call while the upstream restarts: %s; want the pid of the restarted process", jsonOf(t, res))
	}
}

// killJobs kills the jobs upstream's process with SIGKILL and returns
// its pid.
func killJobs(t *testing.T, cs *mcp.ClientSession) int {
	t.Helper()
	pid, err := strconv.Atoi(text(call(t, cs, "pid", nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	return pid
}

// A call made in the moment between the upstream's death and
// fulfiller's seeing it finds the session still there, and the SDK's
// client refuses to send on it (its connection has ended). It was never
// sent, so it is not answered "failed during the call" (which says it
// may have run): it waits for the restart and runs once, on the new
// process.
func TestCallMadeAsTheUpstreamDiesRunsOnTheRestart(t *testing.T) {
	ended := make(chan struct{})
	release := make(chan struct{})
	var held, released sync.Once
	hold := func() {
		held.Do(func() { // the first end only: the test's own cleanup ends it too
			close(ended)
			<-release
		})
	}
	free := func() { released.Do(func() { close(release) }) }
	r := childRigWith(t, "jobs", Config{BackoffMin: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond},
		func(f *Front) { f.testSessionEnded = hold })
	t.Cleanup(free) // before the rig's: a failed test does not leave hold waiting
	cs := r.stdioClient("jobs", nil)
	pid1 := killJobs(t, cs)
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream's end was never seen")
	}
	u := r.front.ups["jobs"]
	u.mu.Lock()
	stale := u.cs != nil
	u.mu.Unlock()
	if !stale {
		t.Fatal("the upstream was marked down before the test's call: the moment this test is about has passed")
	}
	got := make(chan *mcp.CallToolResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "pid"})
		if err != nil {
			res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
		}
		got <- res
	}()
	// The call is refused by the SDK and waits for the restart (it made
	// the channel the restart closes), or it was answered at once.
	var res *mcp.CallToolResult
	if !poll.Within(10*time.Second, func() bool {
		select {
		case res = <-got:
			return true
		default:
		}
		u.mu.Lock()
		defer u.mu.Unlock()
		return u.back != nil
	}) {
		t.Fatal("the call neither waited for the restart nor was answered")
	}
	free()
	if res == nil {
		res = <-got
	}
	pid2, err := strconv.Atoi(text(res))
	if res.IsError || err != nil || pid2 == pid1 {
		t.Fatalf("a call made as the upstream died: %s; want the pid of the restarted process", jsonOf(t, res))
	}
}

// A call waiting for an upstream that does not come back ends with its
// context, and its error names the upstream and why it is down.
func TestRestartWaitEndsWithTheCall(t *testing.T) {
	u := &upstream{Upstream: Upstream{Name: "jobs"}, down: errors.New("upstream jobs (a command) ended: signal: killed")}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := u.sessionFor(ctx, nil)
	want := "upstream jobs is not running (upstream jobs (a command) ended: signal: killed); the call ended while fulfiller was restarting it: context canceled"
	if err == nil || err.Error() != want {
		t.Fatalf("sessionFor: %v; want %q", err, want)
	}
}

func TestUpstreamGarbage(t *testing.T) {
	r := childRig(t, "junk")
	cs := r.stdioClient("junk", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.HasPrefix(text(res), "upstream junk failed during the call: ") {
		t.Errorf("result %s", jsonOf(t, res))
	}
}
