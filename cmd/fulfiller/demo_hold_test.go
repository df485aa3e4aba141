//go:build unix

package main

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/internal/poll"
)

// TestDemoHoldPrintsARunThatJoins: `fulfiller demo --hold` prints, once
// its story has played, the `go run ./cmd/fulfiller run` line that joins its gateway
// (URL, space and a token to use), and that line works as printed from
// the repository's root: the second fulfiller joins and /readyz answers
// 200. Only the --http port is swapped for a free one, so the test does
// not depend on 9465 being free.
func TestDemoHoldPrintsARunThatJoins(t *testing.T) {
	t.Parallel() // two processes of their own: mostly waiting
	bin := fulfillerBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envPrefix) {
			env = append(env, kv)
		}
	}
	demo := exec.CommandContext(ctx, bin, "demo", "--color", "never", "--hold")
	demo.Env = env
	out, err := demo.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := demo.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = demo.Process.Signal(syscall.SIGTERM); _ = demo.Wait() }()
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "  FULFILLER_TOKEN=") {
				lines <- sc.Text()
			}
		}
		close(lines)
	}()
	var line string
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatal("demo --hold ended without printing a run line")
		}
		line = l
	case <-ctx.Done():
		t.Fatal("demo --hold printed no run line")
	}
	// The line is written for a newcomer who has only used go run, as
	// the README's: the test runs the same command as its binary.
	fields := strings.Fields(line)
	if len(fields) < 5 || strings.Join(fields[1:5], " ") != "go run ./cmd/fulfiller run" || !strings.Contains(line, " --gateway ws://127.0.0.1:") || !strings.Contains(line, " --space fulfiller-lab ") {
		t.Fatalf("run line %q: want FULFILLER_TOKEN=… go run ./cmd/fulfiller run --gateway ws://… --space …", line)
	}
	fields = append(fields[:1], fields[4:]...)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	args := fields[1:]
	for i := range args {
		if args[i] == "--http" && i+1 < len(args) {
			args[i+1] = addr
		}
	}
	run := exec.CommandContext(ctx, bin, args...)
	run.Dir, err = filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	run.Env = append(env, fields[0])
	var stderr lockedBuilder
	run.Stderr = &stderr
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	poll.UntilServed(t, "the printed run's /readyz answers 200", func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if err := run.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := run.Wait(); err != nil {
		t.Errorf("the printed run exited %v after SIGTERM, want 0\n%s", err, stderr.String())
	}
}
