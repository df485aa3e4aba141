//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/spacetest"
	"github.com/mewkit/fulfiller/internal/testenv"
)

// startNATSServer runs a nats-server process with JetStream on a free
// loopback port for the rest of the test and returns its URL.
func startNATSServer(t *testing.T, w *stateWorld) string {
	t.Helper()
	natsBin := testenv.NATSServer(t)
	addr := freeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.CommandContext(w.ctx, natsBin, "-a", "127.0.0.1", "-p", port, "-js", "-sd", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	poll.Until(t, "nats-server listens", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return "nats://" + addr
}

// TestRunGroupOfTwoAnswersOnceAndAdopts is issue 14's group test, run as
// an operator would: two fulfiller binaries with their own --id share one
// nats-server. Every proposal gets exactly one answer from the group and
// nobody hears busy or duplicate; when the member holding a prompt is
// killed, the other asks it again within the lease and alice's approval
// fulfils the call once.
func TestRunGroupOfTwoAnswersOnceAndAdopts(t *testing.T) {
	t.Parallel() // the fulfiller as a process of its own: mostly waiting
	bin := fulfillerBinary(t)
	w := newStateWorld(t)
	url := startNATSServer(t, w)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("fulfiller logs:\n%s", w.logs.String())
		}
	})
	coder := spacetest.Join(t, w.ctx, w.srv, "coder", "coder-token")
	prop := spacetest.NewProposer(t, coder)

	procs := map[string]*os.Process{}
	addrs := map[string]string{}
	for _, id := range []string{"ful-a", "ful-b"} {
		addrs[id] = freeAddr(t)
		procs[id] = w.start(bin, id, url, "--lease", "2s", "--http", addrs[id])
	}
	for _, id := range []string{"ful-a", "ful-b"} {
		waitJoined(t, w, id)
	}

	var ids []string
	for i := range 12 {
		id, tool := fmt.Sprintf("g-%d", i), "done"
		if i%3 == 2 {
			tool = "deny"
		}
		w.propose(prop, id, tool)
		ids = append(ids, id)
	}
	for i, id := range ids {
		out, err := prop.Wait(w.ctx, id)
		if err != nil {
			t.Fatalf("%s: %v\n%s", id, err, w.logs.String())
		}
		if want := i%3 != 2; out.Fulfilled != want || (!want && out.Reason != "policy") {
			t.Errorf("%s: %+v, want fulfilled %v (else reject policy)", id, out, want)
		}
	}

	// The member that asks about p-ask dies; the other asks again.
	w.propose(prop, "p-ask", "ask")
	first := w.elicitationFor("p-ask", 1)
	if err := procs[first.From].Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	again := w.elicitationFor("p-ask", 2)
	if again.From == first.From {
		t.Fatalf("p-ask asked again by %s, the member that was killed", again.From)
	}
	t.Logf("%s asked again %.1fs after %s was killed", again.From, time.Since(killed).Seconds(), first.From)
	w.accept(again)
	out, err := prop.Wait(w.ctx, "p-ask")
	if err != nil || !out.Fulfilled {
		t.Fatalf("p-ask after alice accepted the adopter's prompt: %+v %v\n%s", out, err, w.logs.String())
	}
	// The proposer has its answer; the survivor ends p-ask once it has
	// read the response too (else, alone, it would answer it "other" as
	// it stops). Once it has exited, whatever the group sent is on the
	// wire: no second answer can still be coming.
	poll.Until(t, again.From+" has nothing pending", func() bool {
		_, m := httpGet(addrs[again.From], "/metrics", "")
		return strings.Contains(m, "\nfulfiller_proposals_pending 0\n")
	})
	if err := procs[again.From].Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if st, err := procs[again.From].Wait(); err != nil || !st.Success() {
		t.Fatalf("%s after SIGTERM: %v %v", again.From, st, err)
	}
	for _, id := range append(ids, "p-ask") {
		if n := len(w.answersTo(id)); n != 1 {
			t.Errorf("%s has %d answers from the group, want 1: %v", id, n, w.answersTo(id))
		}
	}
	for _, env := range w.wire.Envelopes() {
		if env.Kind == agent.KindReject && (reasonOf(env) == "busy" || reasonOf(env) == "duplicate") {
			t.Errorf("a member said %s: %+v", reasonOf(env), env)
		}
	}
	for tool, want := range map[string]int32{"done": 8, "ask": 1} {
		if got := w.calls[tool].Load(); got != want {
			t.Errorf("%s ran %d times, want %d", tool, got, want)
		}
	}
}

// waitJoined waits for the gateway's presence event of id joining.
func waitJoined(t *testing.T, w *stateWorld, id string) {
	t.Helper()
	w.wire.WaitFor(t, id+" joins", func(env agent.Envelope) bool {
		var p struct {
			Event       string
			Participant struct{ ID string }
		}
		return env.Kind == agent.KindPresence && json.Unmarshal(env.Payload, &p) == nil && p.Event == "join" && p.Participant.ID == id
	})
}

func reasonOf(env agent.Envelope) string {
	var p struct {
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(env.Payload, &p)
	return p.Reason
}
