//go:build unix

package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mewkit/fulfiller/internal/logbuf"
)

// fulfiller mcp serve: a go-sdk client over Streamable HTTP at
// /mcp/NAME gets the same decisions as over stdio, and SIGTERM stops
// the server (exit 0).
func TestMCPServeDecidesOverHTTP(t *testing.T) {
	t.Parallel() // its own processes, directories and port, mostly waiting on them
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "files")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	policy := filepath.Join(tmp, "policy.rego")
	if err := os.WriteFile(policy, []byte(mcpPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(fulfillerBinary(t), "mcp", "serve", "--listen", "127.0.0.1:0", "--policy", policy,
		"--state", filepath.Join(tmp, "state"), "--decision-log", filepath.Join(tmp, "decisions.jsonl"),
		"--upstream", "files=cmd:env "+mcpFilesEnv+"='"+dir+"' '"+exe+"'")
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+filepath.Join(tmp, "config"), "XDG_STATE_HOME="+filepath.Join(tmp, "xdgstate"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	logs := &logbuf.Buffer{}
	addr, endpoint := make(chan string, 1), make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			_, _ = logs.Write([]byte(line + "\n"))
			if rest, ok := strings.CutPrefix(line, "fulfiller mcp serving on http://"); ok {
				addr <- strings.TrimSuffix(rest, "/mcp/NAME")
			}
			if url, ok := strings.CutPrefix(line, "  files: "); ok {
				endpoint <- url
			}
		}
	}()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("fulfiller mcp serve's stderr:\n%s", logs.String())
		}
	})
	var host string
	select {
	case host = <-addr:
	case <-time.After(60 * time.Second):
		t.Fatal("fulfiller mcp serve did not say where it serves")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The endpoint as it says it, which an operator copies.
	var url string
	select {
	case url = <-endpoint:
	case <-time.After(5 * time.Second):
		t.Fatal("fulfiller mcp serve did not list the files endpoint")
	}
	if url != "http://"+host+"/mcp/files" {
		t.Errorf("files endpoint listed as %q, want http://%s/mcp/files", url, host)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "http-client", Version: "1.0"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	r := &mcpRig{Dir: dir, cs: cs}
	if res := r.call(t, "read_file", map[string]any{"path": "a.txt"}); res.IsError || resultText(res) != "hello" {
		t.Errorf("read_file: isError %v, %q; want the file's content", res.IsError, resultText(res))
	}
	res := r.call(t, "write_file", map[string]any{"path": "a.txt", "content": "evil"})
	if want := "fulfiller refused this call (policy): writes are not allowed here"; !res.IsError || resultText(res) != want || res.Meta["fulfiller/reason"] != "policy" {
		t.Errorf("write_file: isError %v, %q, _meta %v; want %q", res.IsError, resultText(res), res.Meta, want)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(b) != "hello" {
		t.Errorf("a.txt is %q after a refused write", b)
	}
	_ = cs.Close()

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("after SIGTERM: %v; want exit 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("fulfiller mcp serve did not stop on SIGTERM")
	}
}
