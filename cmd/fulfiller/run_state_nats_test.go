//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/testenv"
)

// TestRunBinaryReadinessFollowsTheNATSServer runs the binary with --state
// on a nats-server process, as a group member would: /readyz is ready
// with "store":"ok"; with the server stopped it turns 503 naming the store
// (and nothing secret); with the server back on its port and directory it
// turns ready again without a restart of fulfiller.
func TestRunBinaryReadinessFollowsTheNATSServer(t *testing.T) {
	t.Parallel() // the fulfiller as a process of its own: mostly waiting
	natsBin := testenv.NATSServer(t)
	bin := fulfillerBinary(t)
	w := newHumanWorld(t)
	storeDir := t.TempDir()
	natsAddr, httpAddr := freeAddr(t), freeAddr(t)
	_, natsPort, _ := net.SplitHostPort(natsAddr)

	var nats *exec.Cmd
	startNATS := func() {
		t.Helper()
		nats = exec.CommandContext(w.Ctx, natsBin, "-a", "127.0.0.1", "-p", natsPort, "-js", "-sd", storeDir)
		if err := nats.Start(); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, "nats-server listens", func() bool {
			c, err := net.Dial("tcp", natsAddr)
			if err == nil {
				c.Close()
			}
			return err == nil
		})
	}
	stopNATS := func() {
		_ = nats.Process.Signal(syscall.SIGTERM)
		_ = nats.Wait()
	}
	startNATS()
	defer func() { stopNATS() }()

	url := "nats://" + natsAddr
	cmd, stderr := w.runFulfiller(bin, nil, "--state", url, "--http", httpAddr)
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	readyz := func() (int, map[string]any) {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		return resp.StatusCode, body
	}
	poll.UntilServed(t, "ready with the store up", func() bool {
		code, body := readyz()
		return code == 200 && body["store"] == "ok"
	})
	if !slices.Contains(w.Space.Participants(), "fulfiller") {
		t.Fatal("ready but not joined")
	}

	stopNATS()
	wantReason := fmt.Sprintf("the state store (%s) does not accept writes: ", url)
	poll.UntilServed(t, "503 naming the store", func() bool {
		code, body := readyz()
		reason, _ := body["reason"].(string)
		return code == 503 && body["store"] == "failing" && strings.HasPrefix(reason, wantReason)
	})

	startNATS()
	poll.UntilServed(t, "ready again with the store back", func() bool {
		code, body := readyz()
		return code == 200 && body["store"] == "ok"
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit %v\n%s", err, stderr)
	}
}

// freeAddr returns a loopback address with a port free right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// httpGet asks the binary's --http server at addr for path, with a bearer
// token when tok is set: the status (0 when unreachable) and the body (the
// error when unreachable).
func httpGet(addr, path, tok string) (int, string) {
	req, err := http.NewRequest("GET", "http://"+addr+path, nil)
	if err != nil {
		return 0, err.Error()
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
