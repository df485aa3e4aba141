//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/state"
	"github.com/mewkit/fulfiller/internal/outbox"
	"github.com/mewkit/fulfiller/internal/poll"
)

// TestRunBinarySendsAnswersQueuedBeforeARestart: an answer a previous
// process queued in the --state DIR (the gateway was unreachable when it
// stopped) is sent by `fulfiller run` on the same DIR as soon as it has
// joined, with its original envelope id, and leaves the store once
// written; a stopped run removes its lease.
func TestRunBinarySendsAnswersQueuedBeforeARestart(t *testing.T) {
	t.Parallel() // the fulfiller as a process of its own: mostly waiting
	bin := fulfillerBinary(t)
	w := newHumanWorld(t)
	dir := filepath.Join(t.TempDir(), "state")
	ctx, cancel := context.WithTimeout(w.Ctx, 50*time.Second)
	defer cancel()

	open := func() *state.Store {
		s, err := state.Open(ctx, state.Config{Mode: state.Mode{Kind: state.Dir, Dir: dir}, Member: "fulfiller"})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := open()
	ans := agent.Envelope{ID: "fulfiller-before-restart", To: []string{"coder"}, Kind: agent.KindReject,
		CorrelationID: agent.CorrelationIDs{"p-old"}, Payload: json.RawMessage(`{"reason":"timeout"}`)}
	agent.Stamp(&ans, "fulfiller", time.Now())
	outbox.New(before, 4, nil).Put(ans)
	if err := before.Close(); err != nil {
		t.Fatal(err)
	}

	frames, stopTap := w.Space.Tap(256)
	defer stopTap()
	cmd, stderr := w.runFulfiller(bin, nil, "--state", dir)
	for sent := false; !sent; {
		select {
		case f := <-frames:
			sent = bytes.Contains(f, []byte(`"id":"fulfiller-before-restart"`)) && bytes.Contains(f, []byte(`"kind":"mcp/reject"`))
		case <-ctx.Done():
			t.Fatalf("the queued answer was never sent\n%s", stderr)
		}
	}
	poll.Until(t, "the fulfiller joined", func() bool { return slices.Contains(w.Space.Participants(), "fulfiller") })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr.String(), `"msg":"state store open"`) {
		t.Errorf("no state store line in the log:\n%s", stderr)
	}

	after := open()
	defer after.Close()
	if as, err := after.Outbox(ctx); err != nil || len(as) != 0 {
		t.Fatalf("store outbox after the run: %d answers, %v", len(as), err)
	}
	if ms, err := after.Members(ctx); err != nil || len(ms) != 0 {
		t.Fatalf("live members after a graceful stop: %+v, %v", ms, err)
	}
}
