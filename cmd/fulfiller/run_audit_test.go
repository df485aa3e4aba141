//go:build linux

package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/internal/spacetest"
)

// TestRunBinaryDecisionLogOnFullDisk runs the real binary with
// --decision-log /dev/full (a disk that is always full): a proposal the
// policy fulfils and one it escalates are both rejected "other" with the
// reason, no tool call and no prompt goes out, /readyz is 503 naming the
// decision log, and the failure metric counts.
func TestRunBinaryDecisionLogOnFullDisk(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	bin := fulfillerBinary(t)
	w := newHumanWorld(t)
	if err := os.WriteFile(w.Policy, []byte(`package fulfiller

decision := {"action": "fulfill"} if input.tool.name == "read_file"

decision := {"action": "escalate", "message": "a human decides"} if input.tool.name == "write_file"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, srv := w.Ctx, w.Space
	wire := spacetest.RecordWire(t, srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd, stderr := w.runFulfiller(bin, nil, "--http", addr, "--decision-log", "/dev/full")
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitUntilTrue(t, "/readyz says ready", func() bool { code, _ := get("/readyz"); return code == 200 })

	prop := w.coder()
	waitUntilTrue(t, "the fulfiller sees the coder", func() bool { return slices.Contains(srv.Participants(), "coder") })
	const refused = "the decision log cannot be written, so this fulfiller neither fulfils nor escalates until it can; propose again later"
	for _, c := range []struct{ id, call string }{
		{"p-read", `{"method":"tools/call","params":{"name":"read_file","arguments":{"path":"/x"}}}`},
		{"p-write", `{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/x"}}}`},
	} {
		id, err := prop.Propose(ctx, c.id, []string{"fs"}, json.RawMessage(c.call))
		if err != nil {
			t.Fatal(err)
		}
		out, err := prop.Wait(ctx, id)
		if err != nil || !out.Rejected || out.Reason != "other" || out.RejectedBy != "fulfiller" {
			t.Fatalf("%s: proposer got %+v (%v), want reject other\n%s", id, out, err, stderr.String())
		}
		if chat := prop.WaitChat(ctx, id); chat != refused {
			t.Errorf("%s: chat %q, want %q", id, chat, refused)
		}
	}
	for _, env := range wire.Envelopes() {
		if env.From == "fulfiller" && env.Kind == agent.KindRequest && !strings.Contains(string(env.Payload), `"tools/list"`) {
			t.Errorf("a request went out without its record: %s", env.Raw)
		}
	}
	code, body := get("/readyz")
	if code != 503 || !strings.Contains(body, `"decision_log": "failing"`) || !strings.Contains(body, "no space left on device") {
		t.Errorf("/readyz = %d %s, want 503 naming the decision log", code, body)
	}
	_, metrics := get("/metrics")
	if strings.Contains(metrics, "fulfiller_decision_log_write_failures_total 0\n") || !strings.Contains(metrics, "fulfiller_decision_log_failing 1\n") {
		t.Errorf("metrics do not count the failures:\n%s", grepLines(metrics, "fulfiller_decision_log"))
	}
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
