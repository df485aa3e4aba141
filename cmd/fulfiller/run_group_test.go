//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
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
	spacetest.WaitUntil(t, "nats-server listens", func() bool {
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
	for _, id := range []string{"ful-a", "ful-b"} {
		procs[id] = w.start(bin, id, url, "--lease", "2s")
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, a := coder.Participant("ful-a")
		_, b := coder.Participant("ful-b")
		if a && b {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the members did not both join:\n%s", w.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
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
	time.Sleep(time.Second) // room for a second answer, if one were coming
	for _, id := range ids {
		if n := len(w.answersTo(id)); n != 1 {
			t.Errorf("%s has %d answers from the group, want 1: %v", id, n, w.answersTo(id))
		}
	}
	for _, env := range w.wire.Envelopes() {
		if env.Kind == agent.KindReject && (reasonOf(env) == "busy" || reasonOf(env) == "duplicate") {
			t.Errorf("a member said %s: %+v", reasonOf(env), env)
		}
	}
	if got := w.calls["done"].Load(); got != 8 {
		t.Errorf("done ran %d times, want 8", got)
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
	time.Sleep(time.Second)
	if got := w.calls["ask"].Load(); got != 1 {
		t.Errorf("ask ran %d times, want 1", got)
	}
	if n := len(w.answersTo("p-ask")); n != 1 {
		t.Errorf("p-ask has %d answers, want 1: %v", n, w.answersTo("p-ask"))
	}
}

func reasonOf(env agent.Envelope) string {
	var p struct {
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(env.Payload, &p)
	return p.Reason
}
