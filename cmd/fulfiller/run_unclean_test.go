//go:build unix

package main

import (
	"strings"
	"syscall"
	"testing"

	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/spacetest"
)

// TestRunAfterUncleanStopSaysSoOnce (issue 42): started again on a DIR
// store after SIGKILL, run says in one INFO line of its own that the
// store was not stopped cleanly and is being rebuilt, instead of the
// embedded NATS server's WARN per stream ("Stream state outdated… will
// rebuild"), which read like damage; the store's own lines stay at
// DEBUG. The work done before the kill is still known.
func TestRunAfterUncleanStopSaysSoOnce(t *testing.T) {
	t.Parallel() // the fulfiller as a process of its own: mostly waiting
	bin := fulfillerBinary(t)
	w := newStateWorld(t)
	dir := t.TempDir() + "/state"
	coder := spacetest.Join(t, w.ctx, w.srv, "coder", "coder-token")
	prop := spacetest.NewProposer(t, coder)

	first := w.start(bin, "fulfiller", dir)
	poll.Until(t, "the fulfiller joined", func() bool { _, ok := coder.Participant("fulfiller"); return ok })
	w.propose(prop, "p-done", "done")
	if done, err := prop.Wait(w.ctx, "p-done"); err != nil || !done.Fulfilled {
		t.Fatalf("p-done: %+v %v, want fulfilled\n%s", done, err, w.logs.String())
	}
	w.propose(prop, "p-ask", "ask")
	w.elicitationFor("p-ask", 1)
	if err := first.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, _ = first.Wait()
	before := len(w.logs.String())

	w.start(bin, "fulfiller", dir)
	w.elicitationFor("p-ask", 2) // re-asked: the store was recovered
	logs := w.logs.String()[before:]
	var recovering int
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, `"level":"WARN"`) && strings.Contains(line, `"component":"nats"`) {
			t.Errorf("a NATS warning after the unclean stop: %s", line)
		}
		if strings.Contains(line, `"level":"INFO","msg":"`+msgStoreRecovering+`"`) {
			recovering++
		}
	}
	if recovering != 1 {
		t.Errorf("%d lines %q after the unclean stop, want 1:\n%s", recovering, msgStoreRecovering, logs)
	}
}
