//go:build unix

package main

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/mewkit/fulfiller/internal/poll"
)

// TestRunBinaryAnswersPendingWorkOnSIGTERM builds the real binary, runs
// `fulfiller run` against an in-process space as an operator would, leaves a
// proposal waiting for a human who never answers, and sends SIGTERM: the
// proposer must get reject "other" with an explanation, and the process must
// exit 0.
func TestRunBinaryAnswersPendingWorkOnSIGTERM(t *testing.T) {
	t.Parallel() // the fulfiller as a process of its own: mostly waiting
	bin := fulfillerBinary(t)
	w := newHumanWorld(t)
	ctx, srv := w.Ctx, w.Space

	cmd, stderr := w.runFulfiller(bin, nil)
	poll.Until(t, "the fulfiller joins", func() bool { return slices.Contains(srv.Participants(), "fulfiller") })

	prop := w.coder()
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
