//go:build unix

package main

import (
	"encoding/json"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/mewkit/fulfiller/internal/poll"
)

// TestRunBinaryLogsOneJoinLine: `run --log-format json` logs a join once,
// with the gateway, the id, the capabilities granted and who else is
// there, and writes durations as text ("5s"), not nanoseconds.
func TestRunBinaryLogsOneJoinLine(t *testing.T) {
	t.Parallel() // the fulfiller as a process of its own: mostly waiting
	bin := fulfillerBinary(t)
	w := newHumanWorld(t)
	cmd, stderr := w.runFulfiller(bin, nil)
	// Its own word that it joined: the space has it as a participant a
	// moment before the fulfiller has read the welcome, and a SIGTERM in
	// between stops it before it logs the join (seen in CI).
	poll.Until(t, "the fulfiller's join line", func() bool {
		return slices.Contains(w.Space.Participants(), "fulfiller") && strings.Contains(stderr.String(), `"msg":"joined space"`)
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit %v\n%s", err, stderr)
	}
	var joins []map[string]any
	var store map[string]any
	for line := range strings.Lines(stderr.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not a JSON log line: %q", line)
		}
		msg, _ := rec["msg"].(string)
		if strings.Contains(msg, "joined") {
			joins = append(joins, rec)
		}
		if msg == "state store open" {
			store = rec
		}
	}
	if len(joins) != 1 {
		t.Fatalf("%d join lines, want 1:\n%s", len(joins), stderr)
	}
	j := joins[0]
	caps, _ := json.Marshal(j["capabilities"])
	others, _ := json.Marshal(j["others"])
	if j["msg"] != "joined space" || j["gateway"] != w.Space.URL() || j["participant"] != "fulfiller" ||
		string(caps) != `["mcp/*","chat","mcp/response"]` || string(others) != `["alice","fs"]` {
		t.Errorf("join line %v, want gateway, participant, capabilities and others", j)
	}
	if store == nil || store["lease"] != "5s" || store["seen_ttl"] != "24h0m0s" {
		t.Errorf("state store line %v, want lease \"5s\" and seen_ttl \"24h0m0s\"", store)
	}
}
