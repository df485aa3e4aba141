//go:build unix

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/mewkit/fulfiller/internal/poll"
)

// TestRunBinaryOperations runs the real binary with --http, the join and
// operator API tokens from --token-file and --http-token-file (trimmed),
// --decision-log and --mask, and checks the wiring
// end to end: /readyz turns 200 once joined, the operator API shows the
// pending escalation, SIGHUP reopens a rotated decision log, and on SIGTERM
// the shutdown reject still reaches the log (it is closed after the
// fulfiller has answered everything), masked, before the listener stops.
func TestRunBinaryOperations(t *testing.T) {
	t.Parallel() // the fulfiller as a process of its own: mostly waiting
	bin := fulfillerBinary(t)
	w := newHumanWorld(t)
	ctx, srv := w.Ctx, w.Space
	dir := t.TempDir()
	logPath := filepath.Join(dir, "decisions.jsonl")
	addr := freeAddr(t)

	tokenFile, httpTokenFile := filepath.Join(dir, "token"), filepath.Join(dir, "http-token")
	if err := os.WriteFile(tokenFile, []byte("fulfiller-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(httpTokenFile, []byte("  op-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// FULFILLER_TOKEN emptied: the join token must come from the file (the
	// escalation below needs the capabilities only it grants).
	cmd, stderr := w.runFulfiller(bin, []string{"FULFILLER_TOKEN="}, "--token-file", tokenFile, "--http-token-file", httpTokenFile,
		"--http", addr, "--decision-log", logPath, "--mask", "params.arguments.path")
	get := func(path, tok string) (int, string) { return httpGet(addr, path, tok) }
	poll.UntilServed(t, "/readyz says ready", func() bool { code, _ := get("/readyz", ""); return code == 200 })

	prop := w.coder()
	poll.Until(t, "the fulfiller sees the coder", func() bool { return slices.Contains(srv.Participants(), "coder") })
	id, err := prop.Propose(ctx, "p-ops", []string{"fs"}, json.RawMessage(`{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/very/secret"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	poll.UntilServed(t, "the operator API shows the escalation", func() bool {
		code, body := get("/v1/proposals/"+id, "op-secret")
		return code == 200 && strings.Contains(body, `"state": "awaiting_approval"`)
	})
	// Its line is written once its record is (the API shows the phase
	// from then on, the line a moment later): rotate after it.
	poll.Until(t, "the escalated line in the decision log", func() bool {
		raw, err := os.ReadFile(logPath)
		return err == nil && bytes.Contains(raw, []byte(`"stage":"escalated"`))
	})
	if code, _ := get("/v1/proposals/"+id, ""); code != 401 {
		t.Fatalf("operator API without the token: %d, want 401", code)
	}

	// logrotate: rename, then SIGHUP. The old file keeps what was written
	// before; the fulfiller starts a new one.
	if err := os.Rename(logPath, logPath+".1"); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "a new decision log after SIGHUP", func() bool { _, err := os.Stat(logPath); return err == nil })

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if out, err := prop.Wait(ctx, id); err != nil || !out.Rejected || out.Reason != "other" {
		t.Fatalf("proposer got %+v (%v)", out, err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit %v\n%s", err, stderr.String())
	}
	stages := func(path string) []string {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(raw, []byte("/very/secret")) {
			t.Errorf("masked argument in %s:\n%s", path, raw)
		}
		var out []string
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			var r struct {
				Stage, Reason string
				ProposalID    string `json:"proposal_id"`
			}
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("%s: %v: %s", path, err, line)
			}
			if r.ProposalID != id {
				t.Errorf("record for %q: %s", r.ProposalID, line)
			}
			out = append(out, r.Stage+":"+r.Reason)
		}
		return out
	}
	if got, want := stages(logPath+".1"), []string{"decided:", "escalated:"}; !slices.Equal(got, want) {
		t.Errorf("rotated log: %v, want %v", got, want)
	}
	if got, want := stages(logPath), []string{"rejected:other"}; !slices.Equal(got, want) {
		t.Errorf("new log: %v, want %v", got, want)
	}
	if code, _ := get("/healthz", ""); code != 0 {
		t.Errorf("the listener is still up after exit: %d", code)
	}
	for _, secret := range []string{"fulfiller-token", "op-secret"} {
		if strings.Contains(stderr.String(), secret) {
			t.Errorf("%s appears in the logs", secret)
		}
	}
}
