package testenv

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// recorder captures what Missing does to a test.
type recorder struct {
	testing.TB
	failed, skipped bool
}

func (r *recorder) Helper()                        {}
func (r *recorder) Fatalf(string, ...any)          { r.failed = true }
func (r *recorder) Skipf(string, ...any)           { r.skipped = true }
func (r *recorder) Logf(format string, a ...any)   {}
func (r *recorder) Errorf(format string, a ...any) {}

func TestMissingFailsUnderCIAndSkipsElsewhere(t *testing.T) {
	for _, tc := range []struct {
		ci            string
		fail, skipped bool
	}{{"true", true, false}, {"", false, true}, {"false", false, true}} {
		t.Setenv("CI", tc.ci)
		r := &recorder{TB: t}
		Missing(r, "no %s", "tmux")
		if r.failed != tc.fail || r.skipped != tc.skipped {
			t.Errorf("CI=%q: failed %v, skipped %v; want %v, %v", tc.ci, r.failed, r.skipped, tc.fail, tc.skipped)
		}
	}
}

func TestMain(m *testing.M) {
	RunAsNATSServer()
	os.Exit(m.Run())
}

// TestNATSServerFindsTheBinary: the variable wins; a variable naming
// nothing is Missing (fail under CI, skip elsewhere), not a fallback;
// unset, it is this test binary, run as nats-server.
func TestNATSServerFindsTheBinary(t *testing.T) {
	dir := t.TempDir()
	fromEnv := filepath.Join(dir, "nats-server")
	if err := os.WriteFile(fromEnv, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, env, want string
	}{
		{"variable", fromEnv, fromEnv},
		{"variable naming nothing", filepath.Join(dir, "nope"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(NATSServerEnv, tc.env)
			for _, ci := range []string{"true", ""} {
				t.Setenv("CI", ci)
				r := &recorder{TB: t}
				got := NATSServer(r)
				missing := r.failed || r.skipped
				if got != tc.want || missing != (tc.want == "") || (missing && r.failed != (ci == "true")) {
					t.Errorf("CI=%q: got %q (failed %v, skipped %v), want %q", ci, got, r.failed, r.skipped, tc.want)
				}
			}
		})
	}
}

// TestNATSServerRunsTheTestBinary: unset, NATSServer's program is a real
// nats-server with JetStream, configured by nats-server's own flags.
func TestNATSServerRunsTheTestBinary(t *testing.T) {
	t.Setenv(NATSServerEnv, "")
	bin := NATSServer(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	_, port, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-a", "127.0.0.1", "-p", port, "-js", "-sd", t.TempDir())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	var nc *nats.Conn
	for nc == nil {
		if nc, err = nats.Connect("nats://"+addr, nats.Timeout(time.Second)); err != nil {
			if ctx.Err() != nil {
				t.Fatalf("no nats-server on %s: %v; it printed:\n%s", addr, err, out.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.AccountInfo(ctx); err != nil {
		t.Fatalf("JetStream account info: %v", err)
	}
	if v := nc.ConnectedServerVersion(); v != server.VERSION {
		t.Errorf("server version %s, want the module's %s", v, server.VERSION)
	}
}

func TestQuickRaceExitsKeepsWhatTheCallerGave(t *testing.T) {
	for _, c := range []struct{ before, after string }{
		{"", "atexit_sleep_ms=0"},
		{"halt_on_error=1", "halt_on_error=1 atexit_sleep_ms=0"},
		{"atexit_sleep_ms=250", "atexit_sleep_ms=250"},
	} {
		t.Setenv("GORACE", c.before)
		QuickRaceExits()
		if got := os.Getenv("GORACE"); got != c.after {
			t.Errorf("GORACE %q: QuickRaceExits made it %q, want %q", c.before, got, c.after)
		}
	}
}
