//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/testenv"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/internal/spacetest"
)

// TestRunBinaryDecisionLogOnFullDisk runs the real binary with
// --decision-log /dev/full (a disk that is always full): a proposal the
// policy fulfils and one it escalates are both rejected "other" with the
// reason, no tool call and no prompt goes out, /readyz is 503 naming the
// decision log, and the failure metric counts.
func TestRunBinaryDecisionLogOnFullDisk(t *testing.T) {
	t.Parallel() // the fulfiller as a process of its own: mostly waiting
	if _, err := os.Stat("/dev/full"); err != nil {
		testenv.Missing(t, "no /dev/full")
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
	addr := freeAddr(t)
	cmd, stderr := w.runFulfiller(bin, nil, "--http", addr, "--decision-log", "/dev/full")
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	get := func(path string) (int, string) { return httpGet(addr, path, "") }
	poll.UntilServed(t, "/readyz says ready", func() bool { code, _ := get("/readyz"); return code == 200 })

	prop := w.coder()
	poll.Until(t, "the fulfiller sees the coder", func() bool { return slices.Contains(srv.Participants(), "coder") })
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

// TestRunBinaryDecisionLogRecoversWhenTheDiskHasRoom: the decision log
// on a tiny tmpfs that is full. A proposal is refused (reject other) and
// /readyz is 503; once space is freed the log writes what it held, is
// ready again, and the next escalation goes out — without a restart.
// Needs permission to mount a tmpfs (root); skipped otherwise.
func TestRunBinaryDecisionLogRecoversWhenTheDiskHasRoom(t *testing.T) {
	t.Parallel() // the fulfiller as a process of its own: mostly waiting
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k,mode=0700"); err != nil {
		testenv.Missing(t, "cannot mount a tmpfs here (needs root): %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	logPath := filepath.Join(dir, "decisions.jsonl")
	if err := os.WriteFile(logPath, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	for chunk := bytes.Repeat([]byte("x"), 512); ; {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	for one := []byte("x"); ; { // the last bytes of the last page too
		if _, err := f.Write(one); err != nil {
			break
		}
	}
	f.Close()

	bin := fulfillerBinary(t)
	w := newHumanWorld(t)
	ctx, srv := w.Ctx, w.Space
	frames, stopTap := srv.Tap(1024)
	defer stopTap()
	addr := freeAddr(t)
	cmd, stderr := w.runFulfiller(bin, nil, "--http", addr, "--decision-log", logPath)
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	ready := func() int {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	poll.UntilServed(t, "/readyz says ready", func() bool { return ready() == 200 })
	prop := w.coder()
	poll.Until(t, "the fulfiller sees the coder", func() bool { return slices.Contains(srv.Participants(), "coder") })
	call := json.RawMessage(`{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/x"}}}`)
	id, err := prop.Propose(ctx, "p-full", []string{"fs"}, call)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := prop.Wait(ctx, id); err != nil || !out.Rejected || out.Reason != "other" {
		t.Fatalf("on a full disk the proposer got %+v (%v), want reject other\n%s", out, err, stderr.String())
	}
	if code := ready(); code != 503 {
		t.Fatalf("/readyz %d on a full disk, want 503", code)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	poll.UntilServed(t, "/readyz ready again without a restart", func() bool { return ready() == 200 })
	id2, err := prop.Propose(ctx, "p-room", []string{"fs"}, call)
	if err != nil {
		t.Fatal(err)
	}
	for asked := false; !asked; {
		select {
		case f := <-frames:
			asked = bytes.Contains(f, []byte(`"method":"elicitation/create"`)) && bytes.Contains(f, []byte(`"p-room"`))
		case <-ctx.Done():
			t.Fatalf("alice was never asked about %s after the recovery\n%s", id2, stderr.String())
		}
	}
	raw, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var r struct {
			ProposalID    string `json:"proposal_id"`
			Stage, Reason string
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("torn line %q: %v", line, err)
		}
		got = append(got, fmt.Sprintf("%s:%s:%s", r.ProposalID, r.Stage, r.Reason))
	}
	// What could not be written while the disk was full is written, in
	// order, once it has room: the escalation fulfiller was about to make,
	// and the reject that replaced it.
	want := []string{"p-full:decided:", "p-full:escalated:", "p-full:rejected:other", "p-room:decided:", "p-room:escalated:"}
	if !slices.Equal(got, want) {
		t.Errorf("decision log %v, want %v", got, want)
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
