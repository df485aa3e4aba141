//go:build unix

package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/internal/poll"
)

// TestRunBinaryShadowPolicy runs the binary with a live policy that
// rejects and a --shadow-policy that would fulfil: the proposer gets the
// live reject and nothing else goes out for the proposal (no fulfilment
// request), the decision log has the shadow line governed by the live
// decision, and /metrics counts the (reject → fulfill) disagreement.
func TestRunBinaryShadowPolicy(t *testing.T) {
	t.Parallel() // the fulfiller as a process of its own: mostly waiting
	bin := fulfillerBinary(t)
	srv, policy := newBinarySpace(t, "package fulfiller\n\ndecision := {\"action\": \"reject\", \"reason\": \"unsafe\"}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	w := &humanWorld{Ctx: ctx, Space: srv, Policy: policy, t: t}
	w.join("fs", "human-token")
	dir := t.TempDir()
	shadowPath := filepath.Join(dir, "shadow.rego")
	if err := os.WriteFile(shadowPath, []byte("package fulfiller\n\ndecision := {\"action\": \"fulfill\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "decisions.jsonl")
	addr := freeAddr(t)
	cmd, stderr := w.runFulfiller(bin, nil, "--http", addr, "--decision-log", logPath, "--shadow-policy", shadowPath)
	get := func(path string) (int, string) { return httpGet(addr, path, "") }
	poll.UntilServed(t, "/readyz says ready", func() bool { code, _ := get("/readyz"); return code == 200 })

	watcher := w.join("watcher", "human-token")
	seen := watcher.Subscribe(agent.SubscribeOptions{All: true, Buffer: 256})
	prop := w.coder()
	poll.Until(t, "the fulfiller sees the coder", func() bool { return slices.Contains(srv.Participants(), "coder") })
	id, err := prop.Propose(w.Ctx, "p-shadow", []string{"fs"}, json.RawMessage(`{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/srv/x"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := prop.Wait(w.Ctx, id); err != nil || !out.Rejected || out.Reason != "unsafe" || out.RejectedBy != "fulfiller" || out.Fulfilled {
		t.Fatalf("proposer got %+v (%v)", out, err)
	}

	var sent []string
	about := func(env agent.Envelope) {
		if env.From == "fulfiller" && (slices.Contains(env.CorrelationID, id) || env.Kind == agent.KindRequest && strings.Contains(string(env.Payload), "tools/call")) {
			sent = append(sent, env.Kind)
		}
	}
	for len(sent) == 0 { // the reject, as another participant sees it
		select {
		case env := <-seen.C():
			about(env)
		case <-w.Ctx.Done():
			t.Fatal("the watcher never saw the reject")
		}
	}

	type record struct {
		DecisionID string `json:"decision_id"`
		Type       string
		Stage      string
		ProposalID string `json:"proposal_id"`
		Revision   *string
		Shadow     *struct {
			Revision string
			Live     string
			Result   map[string]any
			Error    string
			Agrees   *bool
		}
	}
	records := func() []record {
		raw, _ := os.ReadFile(logPath)
		var out []record
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			var r record
			if json.Unmarshal([]byte(line), &r) == nil {
				out = append(out, r)
			}
		}
		return out
	}
	poll.Until(t, "the shadow line in the decision log", func() bool {
		return slices.ContainsFunc(records(), func(r record) bool { return r.Type == "shadow" })
	})
	var decided, shadow record
	for _, r := range records() {
		switch r.Stage {
		case "decided":
			decided = r
		case "shadow":
			shadow = r
		}
	}
	s := shadow.Shadow
	if s == nil || shadow.ProposalID != id || shadow.DecisionID != decided.DecisionID || decided.DecisionID == "" ||
		*shadow.Revision != *decided.Revision || s.Live != "reject" || s.Result["action"] != "fulfill" ||
		s.Agrees == nil || *s.Agrees || s.Error != "" || !strings.HasPrefix(s.Revision, "sha256:") || s.Revision == *decided.Revision {
		t.Fatalf("shadow record %+v %+v, decided %+v", shadow, s, decided)
	}
	_, metrics := get("/metrics")
	if !strings.Contains(metrics, "\n"+`fulfiller_shadow_decisions_total{live="reject",shadow="fulfill"} 1`+"\n") {
		t.Errorf("metrics lack the disagreement:\n%s", grepLines(metrics, "fulfiller_shadow"))
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit %v\n%s", err, stderr.String())
	}
	// Everything the fulfiller sent about the proposal, as another
	// participant saw it: the reject, nothing the shadow decided.
	seen.Close()
	for env := range seen.C() {
		about(env)
	}
	if !slices.Equal(sent, []string{agent.KindReject}) {
		t.Errorf("the fulfiller sent %v about the proposal, want only its reject", sent)
	}
	if !strings.Contains(stderr.String(), "shadow policy loaded") {
		t.Errorf("no shadow line in the log:\n%s", stderr.String())
	}
}
