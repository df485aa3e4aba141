//go:build unix

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/mewkit/fulfiller/internal/poll"
)

// TestRunBinarySIGTERMWithGatewayDown: three proposals wait for a human,
// the gateway goes away, and the operator stops fulfiller. It waits
// --shutdown-timeout for a session, no longer; then it says exactly what
// became of what it owed — the three rejects its proposers are owed, kept
// in the state store for the next run (lost with --state memory, whose
// records die with the process), and the three prompt cancellations its
// approver is owed, lost — and exits 1, not 0.
func TestRunBinarySIGTERMWithGatewayDown(t *testing.T) {
	t.Parallel() // the fulfiller as a process of its own: mostly waiting
	for _, tc := range []struct {
		name  string
		args  []string
		msg   string
		kept  int
		undel int
	}{
		// With the default --state DIR the three rejects are kept there
		// for the next run (TestRunBinaryDeliversShutdownAnswersAfterARestart).
		{"durable", nil, "stopped; 3 answers could not be written and are kept in the state store, to be sent after a restart on it; 0 of 3 answers were lost and 3 cancellations were not sent", 3, 0},
		// A memory store dies with the process: nothing is kept for a
		// next run, and the log must not say so.
		{"memory", []string{"--state", "memory"}, "stopped; 3 of 3 answers were not delivered and 3 cancellations were not sent", 0, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sigtermWithGatewayDown(t, tc.args, tc.msg, tc.kept, tc.undel)
		})
	}
}

func sigtermWithGatewayDown(t *testing.T, extra []string, wantMsg string, wantKept, wantUndelivered int) {
	bin := fulfillerBinary(t)
	w := newHumanWorld(t)
	ctx, srv := w.Ctx, w.Space
	addr := freeAddr(t)
	const apiToken = "shutdown-test-api-token"
	cmd, stderr := w.runFulfiller(bin, []string{"FULFILLER_HTTP_TOKEN=" + apiToken}, append([]string{"--http", addr, "--shutdown-timeout", "1s"}, extra...)...)
	get := func(path string) (int, string) { return httpGet(addr, path, apiToken) }
	poll.UntilServed(t, "/readyz says ready", func() bool { code, _ := get("/readyz"); return code == 200 })

	prop := w.coder()
	poll.Until(t, "the fulfiller sees the coder", func() bool { return slices.Contains(srv.Participants(), "coder") })
	frames, stopTap := srv.Tap(256)
	defer stopTap()
	for _, id := range []string{"p-1", "p-2", "p-3"} {
		if _, err := prop.Propose(ctx, id, []string{"fs"}, json.RawMessage(`{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/x"}}}`)); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, "three escalations wait for alice", func() bool {
		_, body := get("/v1/proposals")
		return strings.Count(body, `"state": "awaiting_approval"`) == 3
	})
	// The state changes before the prompt is written (its record first):
	// the cancellations are owed once alice has the three prompts.
	for asked := 0; asked < 3; {
		select {
		case f := <-frames:
			if bytes.Contains(f, []byte(`"method":"elicitation/create"`)) && bytes.Contains(f, []byte(`"to":["alice"]`)) {
				asked++
			}
		case <-ctx.Done():
			t.Fatalf("alice was asked %d times, want 3", asked)
		}
	}

	srv.Close()
	poll.UntilServed(t, "the fulfiller notices the gateway is gone", func() bool {
		code, body := get("/readyz")
		return code == 503 && strings.Contains(body, `"gateway": "disconnected"`)
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("fulfiller run exited with %v after SIGTERM with the gateway down, want exit status 1\n%s", err, stderr)
	}
	// The cancellations are lost in both modes.
	last := stoppedLine(t, stderr.String())
	if last.Msg != wantMsg || last.Undelivered != wantUndelivered || last.Kept != wantKept || last.Answers != 3 || last.CancellationsUnsent != 3 {
		t.Errorf("stopped line %+v, want %q with %d kept and %d undelivered", last, wantMsg, wantKept, wantUndelivered)
	}
	if strings.Contains(stderr.String(), "every pending proposal was answered") {
		t.Errorf("the log claims every proposal was answered:\n%s", stderr)
	}
}

// TestRunBinaryWrongTokenSaysSo: joined with a token the gateway does not
// know, fulfiller gets only chat and mcp/response. Start-up logs the
// capabilities granted and that it cannot answer; /readyz stays 503.
func TestRunBinaryWrongTokenSaysSo(t *testing.T) {
	t.Parallel() // the fulfiller as a process of its own: mostly waiting
	bin := fulfillerBinary(t)
	w := newHumanWorld(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd, stderr := w.runFulfiller(bin, []string{"FULFILLER_TOKEN=wrong-token"}, "--http", addr)
	const reason = `"reason": "the capabilities the gateway granted (chat, mcp/response) do not permit mcp/reject or mcp/request tools/call: check the token"`
	poll.UntilServed(t, "/readyz says why it is not ready", func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == 503 && strings.Contains(string(body), reason)
	})
	// The log is read once the process is gone (it writes the buffer).
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit %v\n%s", err, stderr)
	}
	logs := stderr.String()
	if !strings.Contains(logs, `"msg":"joined space"`) || !strings.Contains(logs, `"capabilities":["chat","mcp/response"]`) {
		t.Errorf("the granted capabilities are not in the log:\n%s", logs)
	}
	if !strings.Contains(logs, `"msg":"fulfiller cannot answer proposals; /readyz reports not ready until the gateway grants more"`) {
		t.Errorf("start-up does not say it cannot answer:\n%s", logs)
	}
}
