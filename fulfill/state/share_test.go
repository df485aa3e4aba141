package state

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// Several processes on one directory (fulfiller mcp, one per client
// session) share one store: a claim won by one is lost by the others, a
// pin made by one is the others'. When the process hosting the store
// ends, another takes over on the same port and the survivors carry on
// with what was stored; a newcomer after that finds the new host. A
// connection without the directory's token is refused.
func TestSharedDirServesEveryProcess(t *testing.T) {
	dir := t.TempDir()
	open := func(member string) *Store {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := Open(ctx, Config{Mode: Mode{Kind: SharedDir, Dir: dir}, Space: "s", Member: member})
		if err != nil {
			t.Fatalf("Open %s: %v", member, err)
		}
		return s
	}
	first := open("mcp-1")
	second := open("mcp-2")
	defer second.Close()
	ctx := ctxT(t)
	if !first.Shared() || !second.Shared() {
		t.Fatal("a shared directory's store must claim as a group does")
	}
	if won, err := first.Claim(ctx, "p1"); err != nil || !won {
		t.Fatalf("first claims p1: %v, %v", won, err)
	}
	if won, err := second.Claim(ctx, "p1"); err != nil || won {
		t.Fatalf("second claims p1: %v, %v; want lost", won, err)
	}
	if _, err := first.Pin(ctx, "fs", map[string]string{"read_file": "sha256:a"}); err != nil {
		t.Fatal(err)
	}
	if got, err := second.Pin(ctx, "fs", map[string]string{"read_file": "sha256:b"}); err != nil || got["read_file"] != "sha256:a" {
		t.Fatalf("second's pin = %v, %v; want the first's sha256:a", got, err)
	}
	port := func() int {
		a, err := readAddr(dir)
		if err != nil {
			t.Fatal(err)
		}
		return a.Port
	}
	before := port()
	if !first.share.hosting() {
		t.Fatal("the first process to open the directory does not host it")
	}

	first.Close() // the host ends; second takes over
	var won bool
	var err error
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		won, err = second.Claim(cctx, "p2")
		cancel()
		if err == nil {
			break
		}
	}
	if err != nil || !won {
		t.Fatalf("second claims p2 after the host ended: %v, %v", won, err)
	}
	if won, err := second.Claim(ctx, "p1"); err != nil || won {
		t.Fatalf("p1 after the failover: %v, %v; want still claimed", won, err)
	}
	if !second.share.hosting() {
		t.Error("the survivor does not host the store after the host ended")
	}
	if after := port(); after != before {
		t.Errorf("the new host serves on port %d, the old on %d: clients follow either way, but the same port spares them a lookup", after, before)
	}
	third := open("mcp-3")
	defer third.Close()
	if got, err := third.Pin(ctx, "fs", map[string]string{"read_file": "sha256:c"}); err != nil || got["read_file"] != "sha256:a" {
		t.Fatalf("a newcomer's pin = %v, %v; want sha256:a", got, err)
	}

	// The port is on loopback, where every local user reaches it: the
	// token, in a file only the directory's owner reads, is the door.
	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", port()), nats.Token("guess"), nats.MaxReconnects(0))
	if err == nil {
		nc.Close()
		t.Fatal("a connection with a wrong token was accepted")
	}
	if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Errorf("wrong token: %v", err)
	}
}
