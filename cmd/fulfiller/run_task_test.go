package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/spacetest"
	"github.com/mewkit/fulfiller/internal/toolserver"
)

// The built binary follows an MCP task, and a SIGKILL does not lose it:
// `fulfiller run --state DIR` calls a task tool task-augmented, is killed
// while the task runs, and, restarted on the same DIR, follows the task
// again and relays its result to the proposer — the tool called once,
// one tools/call on the wire, and the proposer told by a status chat.
func TestRunBinaryFollowsATaskAcrossSIGKILL(t *testing.T) {
	t.Parallel() // the fulfiller as a process of its own: mostly waiting
	bin := fulfillerBinary(t)
	srv, policy := newBinarySpace(t, `package fulfiller

decision := {"action": "fulfill", "task_timeout": "2m"} if input.tool.name == "migrate"
`)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	wire := spacetest.RecordWire(t, srv)
	release := make(chan struct{})
	var runs atomic.Int32
	jobs := spacetest.ServeTools(t, spacetest.Join(t, ctx, srv, "jobs", "human-token"), toolserver.Tool{
		Name: "migrate", TaskSupport: toolserver.TaskRequired, InputSchema: map[string]any{"type": "object"},
		Call: func(ctx context.Context, _ json.RawMessage) (string, error) {
			runs.Add(1)
			select {
			case <-release:
				return "migrated", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}})
	// The jobs owner may not send notifications here: polling follows.
	jobs.SetTaskOptions(toolserver.TaskOptions{Mode: toolserver.TasksExtension, PollInterval: 100 * time.Millisecond})
	coder := spacetest.Join(t, ctx, srv, "coder", "coder-token")
	prop := spacetest.NewProposer(t, coder)
	dir := filepath.Join(t.TempDir(), "state")
	var logs lockedBuilder
	start := func() *os.Process {
		cmd := exec.CommandContext(ctx, bin, "run", "--gateway", srv.URL(), "--policy", policy, "--state", dir,
			"--log-format", "json", "--policy-timeout", "1m")
		cmd.Env = append(os.Environ(), "FULFILLER_TOKEN=fulfiller-token")
		cmd.Stderr = &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd.Process
	}

	first := start()
	poll.Until(t, "the fulfiller joined", func() bool { _, ok := coder.Participant("fulfiller"); return ok })
	poll.Until(t, "the fulfiller asked jobs for its tools", func() bool {
		for _, e := range wire.Envelopes() {
			if e.From == "jobs" && strings.Contains(string(e.Payload), `"taskSupport":"required"`) {
				return true
			}
		}
		return false
	})
	if _, err := prop.Propose(ctx, "p-migrate", nil, json.RawMessage(`{"method":"tools/call","params":{"name":"migrate","arguments":{}}}`)); err != nil {
		t.Fatal(err)
	}
	// The proposer hears it runs as a task: the task's record is written
	// by then (the status chat follows the record).
	wire.WaitFor(t, "the task status chat", func(e agent.Envelope) bool {
		return e.Kind == agent.KindChat && e.CorrelationID.First() == "p-migrate" && strings.Contains(string(e.Payload), `"stage":"task"`)
	})
	if err := first.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the fulfiller gone", func() bool { _, ok := coder.Participant("fulfiller"); return !ok })

	start()
	wire.WaitFor(t, "a tasks/get after the restart", func(e agent.Envelope) bool {
		return e.From == "fulfiller" && strings.Contains(string(e.Payload), `"tasks/get"`)
	})
	close(release)
	out, err := prop.Wait(ctx, "p-migrate")
	if err != nil || !out.Fulfilled || string(out.Result) != `{"content":[{"type":"text","text":"migrated"}]}` {
		t.Fatalf("p-migrate after the restart: %+v %s %v, want the task's result\n%s", out, out.Result, err, logs.String())
	}
	calls := 0
	for _, e := range wire.Envelopes() {
		if e.From == "fulfiller" && strings.Contains(string(e.Payload), `"tools/call"`) {
			calls++
		}
	}
	if calls != 1 || runs.Load() != 1 {
		t.Errorf("%d tools/call on the wire, the tool ran %d times; want 1 and 1\n%s", calls, runs.Load(), logs.String())
	}
}
