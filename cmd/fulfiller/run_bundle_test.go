//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/internal/bundletest"
	"github.com/mewkit/fulfiller/internal/poll"
)

// TestRunBinaryBundleRollout runs the binary with only --bundle-url (a
// signed bundle on a loopback server, polled every 100ms with a bearer
// token): a proposal is decided by v1; once the server serves v2 (after
// at least one 304), the next proposal is decided by v2 and its decided
// record carries revision v2. A bundle signed with another key is then
// refused: v2 stays in force, /readyz and /metrics show the failing
// reload, and the next proposal is still decided by v2. The token never
// reaches the log.
func TestRunBinaryBundleRollout(t *testing.T) {
	t.Parallel() // the fulfiller as a process of its own: mostly waiting
	bin := fulfillerBinary(t)
	srv, _ := newBinarySpace(t, "package fulfiller\n")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	w := &humanWorld{Ctx: ctx, Space: srv, t: t}

	priv, pub := bundletest.RSAKey(t)
	otherPriv, _ := bundletest.RSAKey(t)
	build := func(reason, rev, key string) []byte {
		dir := t.TempDir()
		src := fmt.Sprintf("package fulfiller\n\ndecision := {\"action\": \"reject\", \"reason\": %q}\n", reason)
		if err := os.WriteFile(filepath.Join(dir, "p.rego"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return bundletest.Build(t, dir, bundletest.Options{Revision: rev, SigningKey: key})
	}
	host := newBundleHost(t, build("unsafe", "v1", priv))
	dir := t.TempDir()
	pubFile := bundletest.WriteFile(t, "pub.pem", []byte(pub))
	tokFile := bundletest.WriteFile(t, "token", []byte("bundle-tok-s3cret\n"))
	logPath := filepath.Join(dir, "decisions.jsonl")
	addr := freeAddr(t)
	cmd := exec.CommandContext(ctx, bin, "run", "--gateway", srv.URL(), "--log-format", "json", "--policy-timeout", "1m",
		"--bundle-url", host.URL+"/policy.tar.gz", "--bundle-verification-key", pubFile, "--bundle-poll", "100ms",
		"--bundle-token-file", tokFile, "--http", addr, "--decision-log", logPath)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "FULFILLER_TOKEN=fulfiller-token")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := func() (code int, r struct{ Revision, ReloadError string }) {
		code, body := httpGet(addr, "/readyz", "")
		var raw struct {
			Revision    string `json:"revision"`
			ReloadError string `json:"reload_error"`
		}
		_ = json.Unmarshal([]byte(body), &raw)
		r.Revision, r.ReloadError = raw.Revision, raw.ReloadError
		return code, r
	}
	poll.UntilServed(t, "/readyz says ready with v1", func() bool { code, r := ready(); return code == 200 && r.Revision == "v1" })

	prop := w.coder()
	poll.Until(t, "the fulfiller sees the coder", func() bool { return slices.Contains(srv.Participants(), "coder") })
	propose := func(id, wantReason string) {
		t.Helper()
		pid, err := prop.Propose(ctx, id, []string{"fs"}, json.RawMessage(`{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/srv/x"}}}`))
		if err != nil {
			t.Fatal(err)
		}
		if out, err := prop.Wait(ctx, pid); err != nil || !out.Rejected || out.Reason != wantReason {
			t.Fatalf("%s: proposer got %+v (%v), want a reject %q", id, out, err, wantReason)
		}
	}
	propose("p-v1", "unsafe")

	// Rollout, after the poll has been answered 304 at least once.
	poll.Until(t, "a 304", func() bool { return host.count(http.StatusNotModified) > 0 })
	host.serve(build("disagree", "v2", priv))
	poll.UntilServed(t, "v2 in force", func() bool { _, r := ready(); return r.Revision == "v2" })
	propose("p-v2", "disagree")

	// A forged bundle (another key): refused, v2 stays.
	host.serve(build("other", "v3", otherPriv))
	poll.UntilServed(t, "the refused bundle in /readyz", func() bool {
		code, r := ready()
		return code == 200 && r.Revision == "v2" && strings.Contains(r.ReloadError, "failed to verify JWT signature")
	})
	_, metrics := httpGet(addr, "/metrics", "")
	for _, want := range []string{"fulfiller_policy_reload_failing 1", `fulfiller_bundle_downloads_total{result="ok"} 2`, `fulfiller_policy_info{default="false",revision="v2"} 1`} {
		if !strings.Contains(metrics, "\n"+want+"\n") {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(metrics, "bundle"))
		}
	}
	for _, want := range []string{`fulfiller_bundle_downloads_total{result="refused"} `, `fulfiller_bundle_downloads_total{result="not_modified"} `} {
		if !strings.Contains(metrics, "\n"+want) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(metrics, "bundle"))
		}
	}
	propose("p-forged", "disagree")

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit %v\n%s", err, stderr.String())
	}
	revisions := map[string]string{}
	raw, _ := os.ReadFile(logPath)
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var r struct {
			Stage      string  `json:"stage"`
			ProposalID string  `json:"proposal_id"`
			Revision   *string `json:"revision"`
		}
		if json.Unmarshal([]byte(line), &r) == nil && r.Stage == "decided" && r.Revision != nil {
			revisions[r.ProposalID] = *r.Revision
		}
	}
	if want := map[string]string{"p-v1": "v1", "p-v2": "v2", "p-forged": "v2"}; !maps.Equal(revisions, want) {
		t.Errorf("decided revisions %v, want %v", revisions, want)
	}
	host.mu.Lock()
	for _, a := range host.auth {
		if a != "Bearer bundle-tok-s3cret" {
			t.Errorf("a download sent Authorization %q", a)
		}
	}
	host.mu.Unlock()
	if strings.Contains(stderr.String(), "bundle-tok-s3cret") {
		t.Errorf("the token is in the log:\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), `"msg":"policy bundle activated"`) {
		t.Errorf("no activation line in the log:\n%s", stderr.String())
	}
}
