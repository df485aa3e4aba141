//go:build unix

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/proposer"
	"github.com/mewkit/fulfiller/internal/space"
)

// TestRunBinaryDeliversShutdownAnswersAfterARestart (security round 3,
// item 7): four proposals wait for a human, the gateway goes away and the
// operator stops fulfiller. The rejects "other" it owes (docs/design.md
// CLI contract) cannot be written; they stay in the --state DIR, and the
// next run on that DIR, with the gateway back, sends each proposer exactly
// one: the same envelope, decided by nobody again (no prompt, no second
// answer).
func TestRunBinaryDeliversShutdownAnswersAfterARestart(t *testing.T) {
	t.Parallel() // the fulfiller as a process of its own: mostly waiting
	bin := fulfillerBinary(t)
	w := newHumanWorld(t)
	ctx := w.Ctx
	dir := filepath.Join(t.TempDir(), "state")
	addr := freeAddr(t)
	const apiToken = "outage-test-api-token"
	get := func(path string) (int, string) { return httpGet(addr, path, apiToken) }
	env := []string{"FULFILLER_HTTP_TOKEN=" + apiToken}
	// 3s to shut down: the four answers are made within it, and kept as
	// the gateway is gone (with 1s, a loaded machine under -race made one
	// of the four in time).
	first, stderr := w.runFulfiller(bin, env, "--http", addr, "--shutdown-timeout", "3s", "--state", dir)
	poll.UntilServed(t, "/readyz says ready", func() bool { code, _ := get("/readyz"); return code == 200 })

	ids := []string{"p-1", "p-2", "p-3", "p-4"}
	proposerOf := map[string]string{}
	frames, stopTap := w.Space.Tap(256)
	defer stopTap()
	for i, id := range ids {
		who := fmt.Sprintf("coder-%d", i+1)
		proposerOf[id] = who
		prop := proposer.New(w.join(who, "coder-token"))
		poll.Until(t, "the space sees "+who, func() bool { return slices.Contains(w.Space.Participants(), who) })
		if _, err := prop.Propose(ctx, id, []string{"fs"}, json.RawMessage(`{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/x"}}}`)); err != nil {
			t.Fatal(err)
		}
	}
	for asked := 0; asked < len(ids); {
		select {
		case f := <-frames:
			if bytes.Contains(f, []byte(`"method":"elicitation/create"`)) && bytes.Contains(f, []byte(`"to":["alice"]`)) {
				asked++
			}
		case <-ctx.Done():
			t.Fatalf("alice was asked %d times, want %d", asked, len(ids))
		}
	}

	u, err := url.Parse(w.Space.URL())
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Space.Close()
	poll.UntilServed(t, "the fulfiller notices the gateway is gone", func() bool {
		code, body := get("/readyz")
		return code == 503 && strings.Contains(body, `"gateway": "disconnected"`)
	})
	if err := first.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = first.Wait()
	// The prompts' cancellations to alice are not kept across a restart
	// (an approver's client drops a prompt whose proposal is answered):
	// those are lost, and the exit status says something was.
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("first run exited with %v, want exit status 1\n%s", err, stderr)
	}
	last := stoppedLine(t, stderr.String())
	if want := "stopped; 4 answers could not be written and are kept in the state store, to be sent after a restart on it; 0 of 4 answers were lost and 4 cancellations were not sent"; last.Msg != want ||
		last.Kept != 4 || last.Undelivered != 0 || last.Answers != 4 || last.CancellationsUnsent != 4 {
		t.Errorf("stopped line %+v, want %q", last, want)
	}

	// The gateway is back on the same address; so is fulfiller, on the
	// same store.
	srv, err := space.New(space.Config{Addr: u.Host, Tokens: map[string][]agent.Capability{
		"fulfiller-token": {{Kind: "mcp/*"}, {Kind: "chat"}},
		"coder-token":     {{Kind: "mcp/proposal"}, {Kind: "mcp/withdraw"}, {Kind: "chat"}},
		"human-token":     {{Kind: "mcp/response"}, {Kind: "chat"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	w.Space = srv
	wire, stopWire := srv.Tap(1024)
	second, stderr2 := w.runFulfiller(bin, env, "--http", addr, "--state", dir)
	rejects := map[string][]agent.Envelope{}
	var others []agent.Envelope // anything else fulfiller says about the four
	read := func(f []byte) {
		e, err := agent.Decode(f)
		if err != nil || e.From != "fulfiller" {
			return
		}
		switch {
		case e.Kind == agent.KindReject:
			rejects[e.CorrelationID.First()] = append(rejects[e.CorrelationID.First()], e)
		case e.Kind == agent.KindRequest && bytes.Contains(e.Payload, []byte(`"elicitation/create"`)):
			others = append(others, e)
		}
	}
	for len(rejects) < len(ids) {
		select {
		case f := <-wire:
			read(f)
		case <-ctx.Done():
			t.Fatalf("after the restart, rejects for %d of %d proposals\n%s", len(rejects), len(ids), stderr2)
		}
	}
	if err := second.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := second.Wait(); err != nil {
		t.Fatalf("second run exited with %v, want 0\n%s", err, stderr2)
	}
	stopWire()
	for f := range wire { // what was broadcast up to the second stop
		read(f)
	}
	for _, id := range ids {
		got := rejects[id]
		if len(got) != 1 {
			t.Errorf("%s: %d rejects after the restart, want exactly 1: %+v", id, len(got), got)
			continue
		}
		e := got[0]
		if e.Protocol != agent.ProtocolV04 || e.ID == "" || !slices.Equal(e.To, []string{proposerOf[id]}) ||
			!slices.Equal(e.CorrelationID, agent.CorrelationIDs{id}) || string(e.Payload) != `{"reason":"other"}` {
			t.Errorf("%s: reject %+v (payload %s), want to [%s], correlation_id [%s], payload {\"reason\":\"other\"}", id, e, e.Payload, proposerOf[id], id)
		}
	}
	if len(others) != 0 {
		t.Errorf("the restarted fulfiller asked about answered proposals again: %+v", others)
	}
	if !strings.Contains(stderr2.String(), `"msg":"reject recorded before the restart sent again"`) {
		t.Errorf("no resend line in the second run's log:\n%s", stderr2)
	}
	if t.Failed() {
		t.Logf("first run:\n%s\nsecond run:\n%s", stderr, stderr2)
	}
}

// stoppedLine is run's last line, "stopped; …", from a JSON log.
type stoppedLog struct {
	Msg                 string
	Kept                int `json:"kept"`
	Undelivered         int `json:"undelivered"`
	Answers             int `json:"answers"`
	CancellationsUnsent int `json:"cancellations_unsent"`
}

func stoppedLine(t *testing.T, log string) stoppedLog {
	t.Helper()
	var last stoppedLog
	found := false
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"msg":"stopped;`) {
			if err := json.Unmarshal(sc.Bytes(), &last); err != nil {
				t.Fatal(err)
			}
			found = true
		}
	}
	if !found {
		t.Fatalf("no stopped line in the log:\n%s", log)
	}
	return last
}
